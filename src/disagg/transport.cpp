#include "disagg/transport.h"

#include "core/error.h"

namespace moe::disagg {

std::vector<ReadOp> coalesce(std::vector<ReadOp> ops) {
  std::vector<ReadOp> out;
  out.reserve(ops.size());
  for (const ReadOp& op : ops) {
    if (op.bytes == 0) continue;
    if (!out.empty()) {
      ReadOp& last = out.back();
      if (last.remote_offset + last.bytes == op.remote_offset && last.local_offset + last.bytes == op.local_offset) {
        last.bytes += op.bytes;
        continue;
      }
    }
    out.push_back(op);
  }
  return out;
}

const char* transfer_state_name(TransferState s) {
  switch (s) {
    case TransferState::kPending: return "pending";
    case TransferState::kDone: return "done";
    case TransferState::kFailed: return "failed";
    case TransferState::kCancelled: return "cancelled";
  }
  return "";
}

const char* transport_kind_name(TransportKind k) { return k == TransportKind::kUcx ? "ucx" : "tcp"; }

TransportKind parse_transport_kind(const std::string& name) {
  if (name == "ucx") return TransportKind::kUcx;
  if (name == "tcp") return TransportKind::kTcp;
  fail("unknown KV transport '{}': expected ucx or tcp", name);
}

}  // namespace moe::disagg
