#pragma once
// Memory of a paged KV cache: for every layer, n_blocks blocks of block_size positions,
// each position one row (MLA: latent + rope key; GQA: keys then values of every KV head)
// stored as its KvRowFormat says (f32, 16-bit, fp8 or q8_0: kernels/kv_format.h). Which
// blocks a sequence owns is decided by its caller (the engine's block manager, or
// generate's simple allocator); the model only writes rows, as f32, and hands the
// attention kernel views of them through a sequence's block table.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/shared_memory.h"
#include "kernels/attention.h"
#include "kernels/kv_format.h"

namespace moe {

class KvStore {
 public:
  // The last n_mtp_layers of the n_layers are the MTP layer's (Model::make_kv_store).
  KvStore(int64_t n_layers, KvRowFormat format, int64_t block_size, int64_t n_blocks, int64_t n_mtp_layers = 0);

  int64_t n_layers() const { return n_layers_; }
  int64_t n_mtp_layers() const { return n_mtp_layers_; }
  const KvRowFormat& format() const { return *format_; }
  KvDtype dtype() const { return format_->dtype(); }
  int64_t row_floats() const { return format_->floats(); }
  int64_t row_bytes() const { return format_->bytes(); }
  int64_t block_size() const { return block_size_; }
  int64_t n_blocks() const { return n_blocks_; }
  size_t bytes() const { return n_bytes_; }
  // The whole pool: layer-major, then block, then position, then row (see row()).
  uint8_t* data() { return data_; }
  // The memory file holding the pool, which other processes on this host may map.
  int fd() const { return memory_.fd(); }

  uint8_t* row(int64_t layer, int32_t block, int64_t offset) {
    return data_ + ((layer * n_blocks_ + block) * block_size_ + offset) * row_bytes();
  }
  // Row of position pos of a sequence whose blocks are `table`.
  uint8_t* position_row(int64_t layer, const std::vector<int32_t>& table, int64_t pos) {
    return row(layer, table[size_t(pos / block_size_)], pos % block_size_);
  }
  // Stores the f32 row `src` (row_floats() values) at position pos.
  void write_row(int64_t layer, const std::vector<int32_t>& table, int64_t pos, const float* src) {
    format_->encode(src, position_row(layer, table, pos));
  }
  // The stored row at position pos, as f32.
  void read_row(int64_t layer, const std::vector<int32_t>& table, int64_t pos, float* out) {
    format_->decode(position_row(layer, table, pos), 0, row_floats(), out);
  }
  // One layer of a sequence in the form the attention kernel reads: its block pointers are
  // written to pointers[0 .. table.size()), which must outlive the view.
  KvView view(int64_t layer, const std::vector<int32_t>& table, const uint8_t** pointers);

  // Positions a table of n blocks holds.
  int64_t capacity(size_t n_table_blocks) const { return int64_t(n_table_blocks) * block_size_; }

 private:
  int64_t n_layers_, n_mtp_layers_;
  // Shared so that views stay valid when the store is moved.
  std::shared_ptr<const KvRowFormat> format_;
  int64_t block_size_, n_blocks_;
  size_t n_bytes_;
  // Shared so that a decode instance on this host can map a prefill instance's pool
  // (disagg/same_host.h). Untouched pages of a large cache cost no memory until a sequence
  // first uses them.
  SharedMemory memory_;
  uint8_t* data_;
};

}  // namespace moe
