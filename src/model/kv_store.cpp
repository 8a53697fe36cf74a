#include "model/kv_store.h"

#include "core/error.h"

namespace moe {

namespace {

size_t checked_floats(int64_t n_layers, int64_t row_floats, int64_t block_size, int64_t n_blocks) {
  if (n_layers <= 0 || row_floats <= 0 || block_size <= 0 || n_blocks <= 0) {
    fail("kv cache: invalid geometry ({} layers, {} floats per row, block size {}, {} blocks)", n_layers,
         row_floats, block_size, n_blocks);
  }
  return size_t(n_layers * n_blocks * block_size * row_floats);
}

}  // namespace

KvStore::KvStore(int64_t n_layers, int64_t row_floats, int64_t block_size, int64_t n_blocks)
    : n_layers_(n_layers),
      row_floats_(row_floats),
      block_size_(block_size),
      n_blocks_(n_blocks),
      n_floats_(checked_floats(n_layers, row_floats, block_size, n_blocks)),
      memory_("moengine-kv", n_floats_ * sizeof(float)),
      data_(static_cast<float*>(memory_.data())) {}

KvView KvStore::view(int64_t layer, const std::vector<int32_t>& table, const float** pointers) {
  for (size_t i = 0; i < table.size(); ++i) pointers[i] = row(layer, table[i], 0);
  return KvView{pointers, block_size_, row_floats_};
}

}  // namespace moe
