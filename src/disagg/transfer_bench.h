#pragma once
// `moengine bench kv-transfer`: read bandwidth of the KV transports against memcpy in the
// same run, one process playing both sides (one transport serving a source region, another
// reading into a destination region), for transfers from 64 KiB to 64 MiB: one contiguous
// read, and the same bytes as scattered KV-block-sized reads (every other block), which is
// what a hand-off of a prompt whose blocks are not adjacent looks like.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "disagg/transport.h"

namespace moe::disagg {

// "ucx" (same-host readers map the source: disagg/same_host.h), "ucx-get" (one-sided gets
// through UCX, as between hosts) or "tcp".
struct TransferMethod {
  std::string name;
  TransportKind kind = TransportKind::kUcx;
  bool same_host_mapping = true;
};
// Throws moe::Error naming the value when it is none of the above.
TransferMethod parse_transfer_method(const std::string& name);

struct TransferBenchOptions {
  std::vector<uint64_t> sizes{64ull << 10, 256ull << 10, 1ull << 20, 4ull << 20, 16ull << 20, 64ull << 20};
  std::vector<TransferMethod> methods{parse_transfer_method("ucx"), parse_transfer_method("ucx-get"),
                                      parse_transfer_method("tcp")};
  uint64_t block_bytes = 36ull << 10;  // 16 positions of DeepSeek's 576-float MLA rows
  double min_seconds = 0.3;            // per measurement
  int min_reps = 3;
};

struct TransferBenchRow {
  uint64_t bytes = 0;
  std::string method;  // "memcpy", or a TransferMethod's name, with " blocks" for the scattered reads
  double gbps = 0.0;   // 1e9 bytes per second
  double seconds_per_transfer = 0.0;
  int reps = 0;
};

// Progress goes to `progress` (one call per measurement, with its name).
std::vector<TransferBenchRow> run_transfer_bench(const TransferBenchOptions& options,
                                                 const std::function<void(const std::string&)>& progress);

}  // namespace moe::disagg
