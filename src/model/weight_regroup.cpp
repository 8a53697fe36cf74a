#include "model/weight_regroup.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "core/error.h"
#include "core/huge_pages.h"
#include "kernels/regrouped.h"

namespace moe {
namespace {

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

}  // namespace

void WeightRegrouper::add(QMatrix& m) {
  if (m.data == nullptr || m.rows <= 0 || m.row_stride != row_bytes(m.type, m.cols)) return;
  const bool regroup = regroup_ && can_regroup(m);
  const size_t size = size_t(m.rows) * m.row_stride;
  matrices_.push_back({&m, size_t(bytes_), regroup});
  items_.push_back({m, size_t(bytes_), regroup});
  starts_.insert(m.data);
  bytes_ += round_up(size, 64);
  if (regroup) regrouped_bytes_ += size;
}

void WeightRegrouper::add(Tensor& t) {
  if (!t) return;
  const int64_t n = t.ne.size() > 2 ? t.ne[2] : 1;
  const QMatrix first = n > 1 ? t.slice(0) : t.matrix();
  const bool regroup = regroup_ && can_regroup(first);
  const size_t each = size_t(first.rows) * row_bytes(t.type, first.cols);
  tensors_.push_back({&t, size_t(bytes_), regroup});
  for (int64_t i = 0; i < n; ++i) {
    items_.push_back({n > 1 ? t.slice(i) : first, size_t(bytes_) + size_t(i) * each, regroup});
    starts_.insert(items_.back().source.data);
  }
  bytes_ += round_up(each * size_t(n), 64);
  if (regroup) regrouped_bytes_ += each * size_t(n);
}

std::shared_ptr<const void> WeightRegrouper::run(const std::function<void(double)>& progress) {
  if (items_.empty()) return {};
  const std::shared_ptr<uint8_t> memory = allocate_huge_pages(size_t(bytes_), "the weights moved at load");
  uint8_t* base = memory.get();
  // Workers take matrices (a 3-D tensor's one by one) while this thread reports progress.
  std::atomic<size_t> next{0}, done_bytes{0};
  const unsigned n_workers = unsigned(std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), items_.size()));
  std::atomic<unsigned> running{n_workers};
  std::vector<std::thread> workers;
  for (unsigned w = 0; w < n_workers; ++w) {
    workers.emplace_back([&] {
      for (size_t i = next++; i < items_.size(); i = next++) {
        const Item& it = items_[i];
        copy_weights(it.source, base + it.offset, it.regroup);
        release_weight_pages(it.source);
        done_bytes += size_t(it.source.rows) * it.source.row_stride;
      }
      --running;
    });
  }
  while (progress && running > 0) {
    progress(double(done_bytes) / double(bytes_));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& w : workers) w.join();
  if (progress) progress(1.0);

  for (const auto& [m, offset, regroup] : matrices_) {
    m->data = base + offset;
    if (regroup) m->type = regrouped_type(m->type);
  }
  for (const auto& [t, offset, regroup] : tensors_) {
    t->data = base + offset;
    t->slices.clear();
    if (regroup) t->type = regrouped_type(t->type);
  }
  return memory;
}

}  // namespace moe
