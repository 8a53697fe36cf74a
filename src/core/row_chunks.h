#pragma once
// The rows of several matrices numbered as one sequence of chunks of a fixed number of rows,
// each matrix starting a new chunk: one ThreadPool::parallel_for over all the chunks hands
// a thread runs of them, which for_rows() turns back into one row range per matrix, so a
// run over consecutive chunks of a matrix is one kernel call streaming those rows.
#include <algorithm>
#include <cstdint>
#include <vector>

namespace moe {

class RowChunks {
 public:
  // 16 rows: a whole group of the regrouped weight layouts and of the row kernels' tiles.
  static constexpr int64_t kChunkRows = 16;

  void clear() {
    first_.assign(1, 0);
    rows_.clear();
  }
  // The next part: a matrix of `rows` rows.
  void add(int64_t rows) {
    rows_.push_back(rows);
    first_.push_back(first_.back() + (rows + kChunkRows - 1) / kChunkRows);
  }
  int64_t size() const { return first_.back(); }  // chunks of all parts

  // Calls fn(part, row_begin, row_end) for the rows of each part in chunks [b, e), in order.
  template <typename Fn>
  void for_rows(int64_t b, int64_t e, Fn&& fn) const {
    size_t p = size_t(std::upper_bound(first_.begin(), first_.end(), b) - first_.begin()) - 1;
    for (; b < e; ++p) {
      const int64_t end = std::min(e, first_[p + 1]);
      if (end > b) fn(p, (b - first_[p]) * kChunkRows, std::min(rows_[p], (end - first_[p]) * kChunkRows));
      b = end;
    }
  }

 private:
  std::vector<int64_t> first_{0};  // first chunk of each part, then the total
  std::vector<int64_t> rows_;
};

}  // namespace moe
