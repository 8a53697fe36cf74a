#pragma once
// A streaming client's request: P's leg and, after a hand-off, D's, each raced against its
// relay to the client, so that events go out as they arrive and a client that leaves
// cancels the leg at once (its connection is closed, which the instance takes as an abort).
// The client's stream starts with the first event there is to relay; until then an
// instance's error answer is relayed with its own status, after it as an SSE error event.
//
// A leg whose instance fails before anything of that leg reached the client (unreachable,
// broke off, 5xx, 429, outside the protocol) runs again at another instance, up to the
// dispatch's max_attempts: P's leg at another P, D's at another D with the same hand-off
// (P still holds the blocks; a D that finds the lease gone recomputes the prompt). A D that
// fails mid-stream is replaced by a new P/D pair continuing from the tokens the client has
// (resume.h), in the same stream. The routing may instead send the whole request to a
// unified instance, whose stream is then the answer.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "http/exchange.h"
#include "proxy/dispatch.h"
#include "proxy/legs.h"
#include "proxy/request_trace.h"
#include "proxy/resume.h"
#include "proxy/stream_events.h"

namespace moe::proxy {

struct StreamLimits {
  std::chrono::milliseconds timeout;  // an instance silent this long fails its leg
  std::chrono::milliseconds release_timeout;
};

class StreamRelay {
 public:
  StreamRelay(http::Exchange& ex, const PdRequest& request, ProxyMetrics& metrics, Dispatch& dispatch, StreamLimits limits,
              RequestTrace& trace);

  // Runs the request to its end, and counts it by the HTTP status the client got
  // (kClientClosed when it left before any).
  asio::awaitable<void> run();

 private:
  // Runs `leg` at instances picked one after another until one serves it, the client
  // leaves, or the attempts run out. Returns the instance that served it (null otherwise).
  asio::awaitable<InstancePtr> attempts(Leg which);
  // Continues the stream after its D failed mid-way: a new request (resume.h) through both
  // legs again. Returns its prefill instance, null when it could not start.
  asio::awaitable<InstancePtr> resume();
  bool can_resume() const;
  // The client's body, or the resumed request's.
  const Json& current_body() const { return resumed_ ? *resumed_ : request_.body; }
  // Streams one leg, relaying its events as they arrive, then ends it (finish()).
  asio::awaitable<void> leg(Leg leg, const Backend& b, const Json& body);
  // Rewrites one event, which arrived `at`, into `out`; false when it broke the protocol
  // (failure_ says how).
  bool take(Leg leg, const Backend& b, const std::string& data, http::Clock::time_point at, std::vector<std::string>& out);
  asio::awaitable<void> finish(Leg leg, const Backend& b, const LegResult& result);
  // The leg failed through its instance: retried elsewhere if it may be, else the client's
  // answer ends with a 502.
  asio::awaitable<void> instance_failed(Leg leg, const std::string& message);
  // Sends events, starting the client's stream first if need be; false when the client left.
  asio::awaitable<bool> send(const std::vector<std::string>& events);
  // Ends the client's answer with an error: a whole response before the stream started,
  // else an error event, [DONE] and the end of the stream.
  asio::awaitable<void> fail(const std::string& body, const http::Response& whole);
  asio::awaitable<void> fail_with(const ApiError& e);
  void time_text(http::Clock::time_point at);
  void count(int status);
  void learn_prefill_time(Instance& p, http::Clock::time_point started);

  http::Exchange& ex_;
  const PdRequest& request_;
  ProxyMetrics& metrics_;
  Dispatch& dispatch_;
  StreamLimits limits_;
  RequestTrace& trace_;
  StreamRewriter rewriter_;
  // While resuming: the resumed request's rewriter, its body, and the conversion of its
  // events into the client's stream.
  std::unique_ptr<StreamRewriter> resume_rewriter_;
  std::optional<Json> resumed_;
  std::optional<ResumeConverter> converter_;
  StreamRewriter* active_ = &rewriter_;
  std::vector<int32_t> prompt_ids_;  // the original P's prompt_token_ids
  std::vector<int32_t> generated_;   // ids of the tokens the client has been sent
  bool resume_ = false;              // the decode leg failed mid-stream: resume it
  int resumes_ = 0;
  bool whole_ = false;           // the request runs whole at a unified instance
  bool ended_ = false;           // the client's answer is complete
  bool decode_started_ = false;  // D sent its first event: it has the KV and owns the lease
  // The current leg: whether any of it reached the client, whether it may still be retried
  // elsewhere, and whether it failed through its instance (retried or not).
  bool leg_relayed_ = false;
  bool may_retry_ = false;
  bool retry_ = false;
  bool instance_fault_ = false;
  bool instance_unreachable_ = false;  // no answer at all
  std::vector<std::string> held_;      // a prefill leg's events before its hand-off
  std::optional<http::Clock::time_point> leg_first_event_;
  // The failure a retried leg did not send: the client's answer if no other instance is left.
  std::optional<std::pair<std::string, http::Response>> unsent_failure_;
  std::string failure_;
  std::optional<http::Clock::time_point> last_text_;
};

}  // namespace moe::proxy
