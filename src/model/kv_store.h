#pragma once
// Memory of a paged KV cache: for every layer, n_blocks blocks of block_size positions,
// each position a row of row_floats floats (MLA: latent + rope key; GQA: keys then values
// of every KV head). Which blocks a sequence owns is decided by its caller (the engine's
// block manager, or generate's simple allocator); the model only reads and writes rows
// through a sequence's block table.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/shared_memory.h"
#include "kernels/attention.h"

namespace moe {

class KvStore {
 public:
  KvStore(int64_t n_layers, int64_t row_floats, int64_t block_size, int64_t n_blocks);

  int64_t n_layers() const { return n_layers_; }
  int64_t row_floats() const { return row_floats_; }
  int64_t block_size() const { return block_size_; }
  int64_t n_blocks() const { return n_blocks_; }
  size_t bytes() const { return n_floats_ * sizeof(float); }
  // The whole pool: layer-major, then block, then position, then row (see row()).
  float* data() { return data_; }
  // The memory file holding the pool, which other processes on this host may map.
  int fd() const { return memory_.fd(); }

  float* row(int64_t layer, int32_t block, int64_t offset) {
    return data_ + ((layer * n_blocks_ + block) * block_size_ + offset) * row_floats_;
  }
  // Row of position pos of a sequence whose blocks are `table`.
  float* position_row(int64_t layer, const std::vector<int32_t>& table, int64_t pos) {
    return row(layer, table[size_t(pos / block_size_)], pos % block_size_);
  }
  // One layer of a sequence in the form the attention kernel reads: its block pointers are
  // written to pointers[0 .. table.size()), which must outlive the view.
  KvView view(int64_t layer, const std::vector<int32_t>& table, const float** pointers);

  // Positions a table of n blocks holds.
  int64_t capacity(size_t n_table_blocks) const { return int64_t(n_table_blocks) * block_size_; }

 private:
  int64_t n_layers_, row_floats_, block_size_, n_blocks_;
  size_t n_floats_;
  // Shared so that a decode instance on this host can map a prefill instance's pool
  // (disagg/same_host.h). Untouched pages of a large cache cost no memory until a sequence
  // first uses them.
  SharedMemory memory_;
  float* data_;
};

}  // namespace moe
