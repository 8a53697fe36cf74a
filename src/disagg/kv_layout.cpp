#include "disagg/kv_layout.h"

#include <fmt/format.h>

#include "core/error.h"
#include "model/kv_store.h"

namespace moe::disagg {

KvGeometry kv_geometry(const KvStore& kv) {
  return KvGeometry{kv.n_layers(), kv.n_blocks(), kv.block_size(), kv.row_bytes(), kv_dtype_name(kv.dtype()), kv.n_mtp_layers()};
}

MemoryRegion kv_region(KvStore& kv) { return MemoryRegion{kv.data(), kv.bytes(), kv.fd()}; }

nlohmann::json to_json(const KvGeometry& g) {
  return {{"n_layers", g.n_layers}, {"n_blocks", g.n_blocks}, {"block_size", g.block_size}, {"row_bytes", g.row_bytes}, {"dtype", g.dtype},
          {"mtp_layers", g.mtp_layers}};
}

namespace {

int64_t positive_field(const nlohmann::json& j, const char* name) {
  if (!j.contains(name) || !j[name].is_number_integer() || j[name].get<int64_t>() < 1) {
    fail("KV geometry: '{}' must be a positive integer", name);
  }
  return j[name].get<int64_t>();
}

}  // namespace

KvGeometry kv_geometry_from_json(const nlohmann::json& j) {
  if (!j.is_object()) fail("KV geometry: expected a JSON object");
  KvGeometry g;
  g.n_layers = positive_field(j, "n_layers");
  g.n_blocks = positive_field(j, "n_blocks");
  g.block_size = positive_field(j, "block_size");
  g.row_bytes = positive_field(j, "row_bytes");
  if (!j.contains("dtype") || !j["dtype"].is_string()) fail("KV geometry: 'dtype' must be a string");
  g.dtype = j["dtype"].get<std::string>();
  // Absent in an older instance's answer: it kept none.
  if (j.contains("mtp_layers")) {
    if (!j["mtp_layers"].is_number_integer() || j["mtp_layers"].get<int64_t>() < 0 || j["mtp_layers"].get<int64_t>() >= g.n_layers) {
      fail("KV geometry: 'mtp_layers' must be an integer in [0, n_layers)");
    }
    g.mtp_layers = j["mtp_layers"].get<int64_t>();
  }
  return g;
}

std::string kv_geometry_mismatch(const KvGeometry& remote, const KvGeometry& local) {
  std::string out;
  const auto differ = [&](const char* what, const std::string& r, const std::string& l) {
    if (r == l) return;
    if (!out.empty()) out += ", ";
    out += fmt::format("{} {} there, {} here", what, r, l);
  };
  differ("layers", std::to_string(remote.n_layers - remote.mtp_layers), std::to_string(local.n_layers - local.mtp_layers));
  if (local.mtp_layers > remote.mtp_layers) {
    if (!out.empty()) out += ", ";
    out += fmt::format("MTP layer rows for {} layers there, {} here (this instance drafts with the MTP layer: its prefill "
                       "instance must keep that layer's KV too, with --speculative-config '{{\"method\": \"mtp\"}}')",
                       remote.mtp_layers, local.mtp_layers);
  }
  differ("block size", std::to_string(remote.block_size), std::to_string(local.block_size));
  differ("row bytes", std::to_string(remote.row_bytes), std::to_string(local.row_bytes));
  differ("dtype", remote.dtype, local.dtype);
  return out;
}

std::vector<ReadOp> kv_block_reads(const KvGeometry& remote, const std::vector<int32_t>& remote_table,
                                   const KvGeometry& local, const std::vector<int32_t>& local_table, size_t first, size_t n) {
  const std::string mismatch = kv_geometry_mismatch(remote, local);
  if (!mismatch.empty()) fail("KV layouts differ: {}", mismatch);
  if (remote_table.size() < n) fail("the remote block table has {} blocks, {} are needed", remote_table.size(), n);
  if (local_table.size() < n) fail("the local block table has {} blocks, {} are needed", local_table.size(), n);
  for (size_t i = first; i < n; ++i) {
    if (remote_table[i] < 0 || remote_table[i] >= remote.n_blocks) {
      fail("remote block id {} is outside the remote pool of {} blocks", remote_table[i], remote.n_blocks);
    }
    if (local_table[i] < 0 || local_table[i] >= local.n_blocks) {
      fail("local block id {} is outside the local pool of {} blocks", local_table[i], local.n_blocks);
    }
  }
  std::vector<ReadOp> ops;
  if (first >= n) return ops;
  ops.reserve(size_t(local.n_layers) * (n - first));
  for (int64_t layer = 0; layer < local.n_layers; ++layer) {
    for (size_t i = first; i < n; ++i) {
      ops.push_back(ReadOp{remote.offset(layer, remote_table[i]), local.offset(layer, local_table[i]), remote.block_bytes()});
    }
  }
  return coalesce(std::move(ops));
}

}  // namespace moe::disagg
