#pragma once
// The UCX transport's same-host path. A prefill instance's KV pool lives in a memory file
// (core/shared_memory.h); a decode instance on the same host takes a duplicate of that
// file's descriptor (pidfd_getfd, the permission CMA needs too), maps it read-only once
// and copies blocks out with memcpy. UCX 1.13 itself emulates gets between processes of
// one host with messages answered by the peer's progress thread, at a fraction of memcpy's
// bandwidth, and its own single-copy transport (CMA) serves no one-sided gets.
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/shared_memory.h"
#include "disagg/transport.h"

namespace moe::disagg {

// What a process advertises so that readers on its host can map its region: the kernel's
// boot id, its pid, the memory file's descriptor there and the file's identity. Null when
// the region has no memory file.
nlohmann::json same_host_advert(const MemoryRegion& region);

// Whether UCX_TLS (null when unset) lets UCX use shared memory: the mapping counts as a
// shared-memory transport, so UCX_TLS=tcp keeps every read on the network path.
bool ucx_tls_allows_shared_memory(const char* tls);

// A peer's region mapped here, and a descriptor that tells when the peer exits.
class SameHostPeer {
 public:
  // Returns null with `why` set when the advertised region is not on this host or cannot
  // be mapped (no permission to take the descriptor, the process gone or replaced).
  static std::unique_ptr<SameHostPeer> open(const nlohmann::json& advert, uint64_t bytes, std::string& why);
  ~SameHostPeer();
  SameHostPeer(const SameHostPeer&) = delete;
  SameHostPeer& operator=(const SameHostPeer&) = delete;

  const char* data() const { return mapping_->data(); }
  // Whether the process that advertised the region has exited (without waiting).
  bool exited() const;

 private:
  SameHostPeer(int pidfd, std::unique_ptr<SharedMapping> mapping) : pidfd_(pidfd), mapping_(std::move(mapping)) {}
  int pidfd_;
  std::unique_ptr<SharedMapping> mapping_;
};

}  // namespace moe::disagg
