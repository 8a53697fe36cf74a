#include "disagg/kv_agent.h"

#include <fmt/format.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>
#include <random>

#include "core/error.h"
#include "http/http_client.h"
#include "http/mailbox.h"

namespace moe::disagg {

namespace asio = boost::asio;

const char* role_name(Role r) {
  switch (r) {
    case Role::kPrefill: return "prefill";
    case Role::kDecode: return "decode";
    case Role::kBoth: break;
  }
  return "both";
}

Role parse_role(const std::string& name) {
  if (name == "both") return Role::kBoth;
  if (name == "prefill") return Role::kPrefill;
  if (name == "decode") return Role::kDecode;
  fail("unknown role '{}': expected both, prefill or decode", name);
}

LoadFailurePolicy parse_load_failure_policy(const std::string& name) {
  if (name == "recompute") return LoadFailurePolicy::kRecompute;
  if (name == "fail") return LoadFailurePolicy::kFail;
  fail("unknown KV load failure policy '{}': expected recompute or fail", name);
}

std::string new_engine_id() {
  std::random_device rd;
  const uint64_t bits = (uint64_t(rd()) << 32) ^ rd();
  return fmt::format("moe-{:012x}", bits & 0xffffffffffffull);
}

const char* pull_failure_name(PullFailure f) {
  switch (f) {
    case PullFailure::kUnreachable: return "unreachable";
    case PullFailure::kMismatch: return "mismatch";
    case PullFailure::kTransfer: return "transfer";
    case PullFailure::kLeaseExpired: return "lease_expired";
    case PullFailure::kCancelled: return "cancelled";
    case PullFailure::kNone: break;
  }
  return "none";
}

namespace {

struct PullError : Error {
  PullError(PullFailure f, const std::string& message) : Error(message), failure(f) {}
  PullFailure failure;
};

std::string peer_name(const Handoff& h) { return fmt::format("prefill instance {}:{}", h.remote_host, h.remote_port); }

http::HttpClient client_for(const Handoff& h, std::chrono::milliseconds timeout) {
  return http::HttpClient(http::Url{h.remote_host, std::to_string(h.remote_port), ""}, http::HttpClientOptions{timeout, 4});
}

}  // namespace

KvAgent::KvAgent(PdConfig config, KvStore& kv, std::string model_fingerprint)
    : config_(std::move(config)),
      http_port_(config_.http_port),
      fingerprint_(std::move(model_fingerprint)),
      geometry_(kv_geometry(kv)),
      transport_(make_transport(config_.transport, kv_region(kv))),
      duration_({0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0}) {}

KvAgent::~KvAgent() = default;

nlohmann::json KvAgent::info() const {
  return {{"engine_id", config_.engine_id},
          {"role", role_name(config_.role)},
          {"model_fingerprint", fingerprint_},
          {"kv", to_json(geometry_)},
          {"transport", transport_->endpoint()}};
}

Handoff KvAgent::handoff(const std::vector<int32_t>& blocks, int64_t request_id, std::vector<int32_t> prompt,
                         int32_t first_token) const {
  Handoff h;
  h.remote_engine_id = config_.engine_id;
  h.remote_host = config_.http_host;
  h.remote_port = http_port_.load();
  h.remote_block_ids = blocks;
  h.remote_request_id = std::to_string(request_id);
  h.lease_ms = config_.lease.count();
  h.prompt_token_ids = std::move(prompt);
  h.first_token_id = first_token;
  return h;
}

std::string KvAgent::peer_key(const Handoff& h) { return fmt::format("{}:{}", h.remote_host, h.remote_port); }

void KvAgent::forget_peer(const Handoff& h) {
  std::lock_guard lk(mu_);
  peers_.erase(peer_key(h));
}

asio::awaitable<KvAgent::Peer> KvAgent::contact(const Handoff& h) {
  const std::string key = peer_key(h);
  {
    std::lock_guard lk(mu_);
    const auto it = peers_.find(key);
    if (it != peers_.end() && it->second.engine_id == h.remote_engine_id) co_return it->second;
  }
  http::HttpClient client = client_for(h, config_.control_timeout);
  http::HttpRequest req;
  req.method = "GET";
  req.target = "/internal/kv/info";
  http::HttpResponse res;
  try {
    res = co_await client.fetch(std::move(req));
  } catch (const Error& e) {
    throw PullError(PullFailure::kUnreachable, fmt::format("{} is unreachable: {}", peer_name(h), e.what()));
  }
  if (res.status != 200) {
    throw PullError(PullFailure::kUnreachable, fmt::format("{} answered {} to GET /internal/kv/info", peer_name(h), res.status));
  }
  nlohmann::json info;
  KvGeometry remote;
  try {
    info = nlohmann::json::parse(res.body);
    remote = kv_geometry_from_json(info.at("kv"));
    (void)info.at("engine_id").get<std::string>();
    (void)info.at("model_fingerprint").get<std::string>();
  } catch (const std::exception& e) {
    throw PullError(PullFailure::kMismatch, fmt::format("{} sent an unreadable /internal/kv/info: {}", peer_name(h), e.what()));
  }
  const std::string engine_id = info["engine_id"].get<std::string>();
  if (engine_id != h.remote_engine_id) {
    // Another engine answers there now (P restarted): the hand-off's blocks are gone.
    throw PullError(PullFailure::kUnreachable, fmt::format("{} is engine {}, not {} that made the hand-off", peer_name(h),
                                                           engine_id, h.remote_engine_id));
  }
  // The layout first: a KV dtype that differs is named as such, not as another fingerprint.
  const std::string mismatch = kv_geometry_mismatch(remote, geometry_);
  if (!mismatch.empty()) {
    throw PullError(PullFailure::kMismatch, fmt::format("{} lays out its KV cache differently: {}", peer_name(h), mismatch));
  }
  if (info["model_fingerprint"] != fingerprint_) {
    throw PullError(PullFailure::kMismatch,
                    fmt::format("{} runs another model (fingerprint {}, this instance {}): its KV cannot be used here",
                                peer_name(h), info["model_fingerprint"].get<std::string>(), fingerprint_));
  }
  if (!info.contains("transport") || info["transport"].value("transport", "") != transport_kind_name(transport_->kind())) {
    throw PullError(PullFailure::kMismatch, fmt::format("{} does not offer the {} KV transport this instance uses", peer_name(h),
                                                        transport_kind_name(transport_->kind())));
  }
  Peer p{engine_id, info["transport"], remote};
  std::lock_guard lk(mu_);
  peers_[key] = p;
  co_return p;
}

asio::awaitable<PullFailure> KvAgent::release_lease(const Handoff& h, std::string& error) {
  http::HttpClient client = client_for(h, config_.control_timeout);
  // Named, not temporaries in the co_await expression: GCC 12 destroys those twice.
  http::HttpRequest req;
  req.target = "/internal/kv/release";
  req.body = nlohmann::json{{"remote_request_id", h.remote_request_id}}.dump();
  http::HttpResponse res;
  try {
    res = co_await client.fetch(std::move(req));
  } catch (const Error& e) {
    error = fmt::format("{} could not confirm the lease: {}", peer_name(h), e.what());
    co_return PullFailure::kUnreachable;
  }
  if (res.status == 200) co_return PullFailure::kNone;
  if (res.status == 410) {
    error = fmt::format("the lease on request {} at {} expired before its KV was pulled", h.remote_request_id, peer_name(h));
    co_return PullFailure::kLeaseExpired;
  }
  error = fmt::format("{} answered {} to the lease release of request {}: {}", peer_name(h), res.status, h.remote_request_id,
                      res.body);
  co_return PullFailure::kLeaseExpired;
}

asio::awaitable<void> KvAgent::release(const Handoff& h) {
  std::string ignored;
  (void)co_await release_lease(h, ignored);
}

asio::awaitable<PullResult> KvAgent::pull(const Handoff& h, const std::vector<int32_t>& local_table, int64_t n_cached,
                                          int64_t n_tokens) {
  const auto start = std::chrono::steady_clock::now();
  PullResult r;
  const auto ex = co_await asio::this_coro::executor;
  std::optional<TransferId> id;
  auto box = std::make_shared<http::Mailbox<TransferStatus>>(ex);
  // Runs however the coroutine ends, cancellation included: no byte may land after it.
  struct Cleanup {
    Transport& transport;
    std::optional<TransferId>& id;
    std::shared_ptr<http::Mailbox<TransferStatus>> box;
    bool finished = false;
    ~Cleanup() {
      box->close();
      if (!id) return;
      if (!finished) transport.cancel(*id);
      transport.forget(*id);
    }
  } cleanup{*transport_, id, box};
  try {
    const Peer peer = co_await contact(h);
    const size_t first = size_t(n_cached / geometry_.block_size);
    const size_t n = size_t((n_tokens + geometry_.block_size - 1) / geometry_.block_size);
    std::vector<ReadOp> ops;
    try {
      ops = kv_block_reads(peer.geometry, h.remote_block_ids, geometry_, local_table, first, n);
    } catch (const Error& e) {
      throw PullError(PullFailure::kMismatch, fmt::format("the hand-off from {} does not fit: {}", peer_name(h), e.what()));
    }
    id = transport_->submit(peer.endpoint, std::move(ops), [box](TransferId, const TransferStatus& s) { box->push(s); });
    const std::vector<TransferStatus> done = co_await box->receive();
    // Empty: cancelled while waiting (the client went away); Cleanup cancels the transfer.
    if (done.empty()) throw PullError(PullFailure::kCancelled, "cancelled: the client went away");
    cleanup.finished = true;
    const TransferStatus& st = done.front();
    if (st.state != TransferState::kDone) {
      throw PullError(PullFailure::kTransfer, fmt::format("the KV transfer from {} failed: {}", peer_name(h), st.error));
    }
    r.bytes = st.bytes;
    std::string error;
    r.failure = co_await release_lease(h, error);
    r.error = error;
  } catch (const PullError& e) {
    r.failure = e.failure;
    r.error = e.what();
  }
  // A cancelled contact or release fails as if P were unreachable: say why it really ended.
  const asio::cancellation_state cancellation = co_await asio::this_coro::cancellation_state;
  if (!r.ok() && cancellation.cancelled() != asio::cancellation_type::none) {
    r.failure = PullFailure::kCancelled;
    r.error = "cancelled: the client went away";
  }
  if (!r.ok() && r.failure != PullFailure::kLeaseExpired) {
    asio::co_spawn(ex, release(h), asio::detached);
  }
  // P may have restarted on its address under the same engine id, with another KV
  // endpoint: the next hand-off from there asks /internal/kv/info again.
  if (r.failure == PullFailure::kTransfer || r.failure == PullFailure::kUnreachable) forget_peer(h);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  record(r);
  co_return r;
}

void KvAgent::record(const PullResult& r) {
  std::lock_guard lk(mu_);
  ++pulls_total_;
  if (r.ok()) {
    bytes_total_ += r.bytes;
    duration_.observe(r.seconds);
  } else {
    ++failures_[pull_failure_name(r.failure)];
  }
}

KvAgent::PullTotals KvAgent::pull_totals() const {
  std::lock_guard lk(mu_);
  return {pulls_total_, bytes_total_};
}

void KvAgent::write_metrics(PrometheusText& out) const {
  std::lock_guard lk(mu_);
  out.counter("kv_transfer_bytes_total", "KV bytes pulled from prefill instances.", double(bytes_total_));
  out.counter("kv_transfer_pulls_total", "KV pulls started (hand-offs received).", double(pulls_total_));
  out.histogram("kv_transfer_duration_seconds", "Seconds from first contact to the lease release of a successful pull.", duration_);
  std::vector<std::pair<std::string, double>> failures;
  for (PullFailure f : {PullFailure::kUnreachable, PullFailure::kMismatch, PullFailure::kTransfer, PullFailure::kLeaseExpired,
                        PullFailure::kCancelled}) {
    const auto it = failures_.find(pull_failure_name(f));
    failures.emplace_back(pull_failure_name(f), it == failures_.end() ? 0.0 : double(it->second));
  }
  out.labelled_counter("kv_transfer_failures_total", "KV pulls that failed, by reason.", "reason", failures);
}

}  // namespace moe::disagg
