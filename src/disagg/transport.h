#pragma once
// Moving KV-cache bytes between engine instances: the interface both transports implement.
//
// Each process exposes one memory region (its KV pool) and reads into that same region.
// A reader (the decode instance) submits a batch of byte-range reads from a remote region
// (the prefill instance's pool) into its own, then polls, awaits or cancels the batch. The
// remote side takes no part in a read beyond serving it (UCX: one-sided gets on memory it
// registered once; TCP: a small server thread), so the engine that owns the remote memory
// must keep those bytes stable while they are read: that is what leases are for.
//
// Offsets are relative to the regions' bases; the layout that turns KV block ids into byte
// ranges lives with the KV pool (kv_layout.h), so transports only ever see bytes.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace moe::disagg {

// The memory a process exposes and reads into. Not owned.
struct MemoryRegion {
  void* base = nullptr;
  size_t bytes = 0;
  // The memory file the region is mapped from, at offset 0 (core/shared_memory.h), or -1.
  // With one, readers on the same host may map the region instead of reading it remotely.
  int fd = -1;
};

// One read: `bytes` bytes at remote_offset in the peer's region land at local_offset here.
struct ReadOp {
  uint64_t remote_offset = 0;
  uint64_t local_offset = 0;
  uint64_t bytes = 0;
};

// Merges reads that continue one another on both sides into one, keeping order; a
// transport sends the result as is.
std::vector<ReadOp> coalesce(std::vector<ReadOp> ops);

enum class TransferState { kPending, kDone, kFailed, kCancelled };
const char* transfer_state_name(TransferState s);  // "pending", "done", "failed", "cancelled"

struct TransferStatus {
  TransferState state = TransferState::kPending;
  std::string error;    // with kFailed: why, naming the peer
  uint64_t bytes = 0;   // bytes landed so far
};

using TransferId = uint64_t;
// Called once when a transfer leaves kPending, on a transport thread: it must be quick and
// must not call back into the transport.
using TransferCallback = std::function<void(TransferId, const TransferStatus&)>;

enum class TransportKind { kUcx, kTcp };
const char* transport_kind_name(TransportKind k);  // "ucx", "tcp"
// "ucx" or "tcp"; throws moe::Error naming the value otherwise.
TransportKind parse_transport_kind(const std::string& name);

struct TransportConfig {
  TransportKind kind = TransportKind::kTcp;
  // The address this process listens on for readers and advertises to them: it must be
  // reachable from the decode instances (not 0.0.0.0). The port 0 picks a free one.
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  // UCX only: a reader on the same host as the region it reads maps that region and copies
  // from it (disagg/same_host.h) unless this is false or UCX_TLS leaves out shared memory.
  bool same_host_mapping = true;
};

// One per process, thread-safe. Construction starts listening and the progress thread;
// destruction cancels every pending transfer (their callbacks run) and stops both.
class Transport {
 public:
  virtual ~Transport() = default;

  virtual TransportKind kind() const = 0;
  // What a reader needs to reach this process's region (addresses, ports, remote keys), as
  // a JSON object. Travels to readers in the hand-off; read it as opaque.
  virtual nlohmann::json endpoint() const = 0;

  // Starts reading ops from the region of the peer described by `remote` (another
  // transport's endpoint()) into this process's region. Never blocks on the network.
  // Ranges outside either region fail the transfer (kFailed), as does a peer that cannot
  // be reached or goes away; the error names the peer and the cause.
  [[nodiscard]] virtual TransferId submit(const nlohmann::json& remote, std::vector<ReadOp> ops,
                                          TransferCallback on_done = {}) = 0;
  [[nodiscard]] virtual TransferStatus poll(TransferId id) = 0;
  // Waits up to `timeout` for the transfer to leave kPending and returns its status.
  [[nodiscard]] virtual TransferStatus wait(TransferId id, std::chrono::milliseconds timeout) = 0;
  // Ends a pending transfer as kCancelled. When cancel returns, no byte of it will land in
  // the local region any more (reads in flight are waited out or aborted), so the caller
  // may reuse that memory. A finished or unknown transfer: no-op.
  virtual void cancel(TransferId id) = 0;
  // Drops a finished transfer's status; poll then reports it unknown (kFailed).
  virtual void forget(TransferId id) = 0;
};

// Throws moe::Error naming the transport and the cause when it cannot start (the port is
// taken, UCX finds no usable device).
std::unique_ptr<Transport> make_transport(const TransportConfig& config, MemoryRegion region);

}  // namespace moe::disagg
