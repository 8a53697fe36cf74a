#pragma once
// One engine instance's part in prefill/decode disaggregation: its role and engine id, the
// transport over its KV pool, and, on a decode instance, the pull of a hand-off's KV from
// the prefill instance: first contact (GET /internal/kv/info on P, checked against this
// instance's model and KV layout), the block reads, then the lease release (POST
// /internal/kv/release), whose answer says whether the blocks were still held when read.
//
// Threads: pull() runs as a coroutine on the calling handler's executor (the HTTP calls
// are made from there, the transport's completion is posted back there). The peer cache
// and the metrics are behind a mutex; the transport is thread-safe.
#include <boost/asio/awaitable.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/prometheus.h"
#include "disagg/handoff.h"
#include "disagg/kv_layout.h"
#include "disagg/transport.h"

namespace moe::disagg {

enum class Role { kBoth, kPrefill, kDecode };
const char* role_name(Role r);  // "both", "prefill", "decode"
Role parse_role(const std::string& name);

// What a decode instance does when the KV cannot be pulled (P unreachable or gone, the
// transfer broke, the lease ran out first).
enum class LoadFailurePolicy { kRecompute, kFail };
LoadFailurePolicy parse_load_failure_policy(const std::string& name);

struct PdConfig {
  Role role = Role::kBoth;
  std::string engine_id;
  TransportConfig transport;
  // Where peers reach this instance's HTTP routes: remote_host / remote_port of a hand-off.
  std::string http_host = "127.0.0.1";
  uint16_t http_port = 0;
  std::chrono::milliseconds lease{30000};
  LoadFailurePolicy on_load_failure = LoadFailurePolicy::kRecompute;
  // Bound on first contact and on the lease release.
  std::chrono::milliseconds control_timeout{5000};
};

// A fresh engine id: "moe-" and 12 random hex digits.
std::string new_engine_id();

enum class PullFailure { kNone, kUnreachable, kMismatch, kTransfer, kLeaseExpired, kCancelled };
const char* pull_failure_name(PullFailure f);  // "unreachable", "mismatch", "transfer", "lease_expired", "cancelled"

struct PullResult {
  PullFailure failure = PullFailure::kNone;
  std::string error;  // why, naming the prefill instance
  uint64_t bytes = 0;
  double seconds = 0.0;
  bool ok() const { return failure == PullFailure::kNone; }
};

class KvAgent {
 public:
  // Starts the transport over the pool; throws moe::Error when it cannot.
  KvAgent(PdConfig config, KvStore& kv, std::string model_fingerprint);
  ~KvAgent();

  const PdConfig& config() const { return config_; }
  // The HTTP port peers reach this instance at, once the server has bound it (port 0).
  void set_http_port(uint16_t port) { http_port_ = port; }
  const std::string& fingerprint() const { return fingerprint_; }
  const KvGeometry& geometry() const { return geometry_; }

  // The body of GET /internal/kv/info: engine id, role, model fingerprint, KV layout and
  // the transport's endpoint.
  nlohmann::json info() const;
  // The hand-off a prefill instance answers with, for a lease on `blocks`.
  Handoff handoff(const std::vector<int32_t>& blocks, int64_t request_id, std::vector<int32_t> prompt, int32_t first_token) const;

  // Fills local_table's blocks [n_cached / block_size, blocks for n_tokens) from the
  // hand-off's blocks, then releases the lease. Never throws: the result says what failed.
  // If the coroutine is cancelled mid-way, the transfer is cancelled before it returns (no
  // byte lands in the local blocks after that) and the lease is released in the background.
  boost::asio::awaitable<PullResult> pull(const Handoff& h, const std::vector<int32_t>& local_table, int64_t n_cached,
                                          int64_t n_tokens);
  // Releases a lease without pulling (a decode request that ended before its pull).
  boost::asio::awaitable<void> release(const Handoff& h);

  // The transfer metrics, in Prometheus text.
  void write_metrics(PrometheusText& out) const;
  // Hand-offs received and their KV bytes, since the start.
  struct PullTotals {
    uint64_t pulls = 0, bytes = 0;
  };
  PullTotals pull_totals() const;

 private:
  struct Peer {
    std::string engine_id;
    nlohmann::json endpoint;
    KvGeometry geometry;
  };
  // The checked peer at host:port (cached until it answers with another engine id, or a
  // pull from it fails to reach it).
  boost::asio::awaitable<Peer> contact(const Handoff& h);
  static std::string peer_key(const Handoff& h);
  void forget_peer(const Handoff& h);
  boost::asio::awaitable<PullFailure> release_lease(const Handoff& h, std::string& error);
  void record(const PullResult& r);

  PdConfig config_;
  std::atomic<uint16_t> http_port_;
  std::string fingerprint_;
  KvGeometry geometry_;
  std::unique_ptr<Transport> transport_;

  mutable std::mutex mu_;
  std::map<std::string, Peer> peers_;  // "host:port" -> checked peer
  uint64_t bytes_total_ = 0;
  uint64_t pulls_total_ = 0;
  std::map<std::string, uint64_t> failures_;
  Histogram duration_;
};

}  // namespace moe::disagg
