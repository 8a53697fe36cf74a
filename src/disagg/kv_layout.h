#pragma once
// Where a KV block's bytes sit in an instance's pool, and the reads that copy a prompt's
// blocks from a prefill instance's pool into a decode instance's. The pool (KvStore) is
// layer-major: layer, then block, then position, then row, so one block of one layer is
// one contiguous run of block_size rows, and consecutive block ids of a layer are adjacent.
// For MLA models a row is the compressed latent plus the rope key: only that moves. The
// last mtp_layers layers are the MTP layer's, kept by instances that draft with it: a
// pool with them can hand off to one without (its layers are copied, the MTP rows left),
// not the other way round.
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "disagg/transport.h"

namespace moe {
class KvStore;
}

namespace moe::disagg {

struct KvGeometry {
  int64_t n_layers = 0;
  int64_t n_blocks = 0;
  int64_t block_size = 0;  // positions per block
  int64_t row_bytes = 0;   // bytes per position per layer
  std::string dtype = "f32";
  int64_t mtp_layers = 0;  // of n_layers

  uint64_t block_bytes() const { return uint64_t(block_size) * uint64_t(row_bytes); }
  uint64_t offset(int64_t layer, int32_t block) const {
    return (uint64_t(layer) * uint64_t(n_blocks) + uint64_t(block)) * block_bytes();
  }
  uint64_t pool_bytes() const { return uint64_t(n_layers) * uint64_t(n_blocks) * block_bytes(); }
};

KvGeometry kv_geometry(const KvStore& kv);
MemoryRegion kv_region(KvStore& kv);

nlohmann::json to_json(const KvGeometry& g);
// Throws moe::Error naming the missing or mistyped field.
KvGeometry kv_geometry_from_json(const nlohmann::json& j);

// Empty when blocks of `remote` can be copied into `local` as they are; otherwise what
// differs (layers, MTP layers, block size, row size, dtype), both values named.
std::string kv_geometry_mismatch(const KvGeometry& remote, const KvGeometry& local);

// The reads that copy blocks [first, n) of remote_table into the same blocks of
// local_table, every layer of local, coalesced. Throws moe::Error when a table is shorter than n,
// a block id is outside its pool, or the geometries differ.
std::vector<ReadOp> kv_block_reads(const KvGeometry& remote, const std::vector<int32_t>& remote_table,
                                   const KvGeometry& local, const std::vector<int32_t>& local_table, size_t first, size_t n);

}  // namespace moe::disagg
