#include "model/kv_store.h"

#include "core/error.h"

namespace moe {

namespace {

size_t checked_bytes(int64_t n_layers, int64_t row_bytes, int64_t block_size, int64_t n_blocks) {
  if (n_layers <= 0 || row_bytes <= 0 || block_size <= 0 || n_blocks <= 0) {
    fail("kv cache: invalid geometry ({} layers, {} bytes per row, block size {}, {} blocks)", n_layers, row_bytes,
         block_size, n_blocks);
  }
  return size_t(n_layers * n_blocks * block_size * row_bytes);
}

}  // namespace

KvStore::KvStore(int64_t n_layers, KvRowFormat format, int64_t block_size, int64_t n_blocks, int64_t n_mtp_layers)
    : n_layers_(n_layers),
      n_mtp_layers_(n_mtp_layers),
      format_(std::make_shared<const KvRowFormat>(std::move(format))),
      block_size_(block_size),
      n_blocks_(n_blocks),
      n_bytes_(checked_bytes(n_layers, format_->bytes(), block_size, n_blocks)),
      memory_("moengine-kv", n_bytes_),
      data_(static_cast<uint8_t*>(memory_.data())) {}

KvView KvStore::view(int64_t layer, const std::vector<int32_t>& table, const uint8_t** pointers) {
  for (size_t i = 0; i < table.size(); ++i) pointers[i] = row(layer, table[i], 0);
  return KvView{pointers, block_size_, row_bytes(), format_.get()};
}

}  // namespace moe
