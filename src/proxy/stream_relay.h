#pragma once
// A streaming client's request: P's leg and, after a hand-off, D's, each raced against its
// relay to the client, so that events go out as they arrive and a client that leaves
// cancels the leg at once (its connection is closed, which the instance takes as an abort).
// The client's stream starts with the first event there is to relay; until then an
// instance's error answer is relayed with its own status, after it as an SSE error event.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "http/exchange.h"
#include "proxy/backends.h"
#include "proxy/legs.h"
#include "proxy/stream_events.h"

namespace moe::proxy {

struct StreamLimits {
  std::chrono::milliseconds timeout;  // an instance silent this long fails its leg
  std::chrono::milliseconds release_timeout;
};

class StreamRelay {
 public:
  StreamRelay(http::Exchange& ex, const PdRequest& request, ProxyMetrics& metrics, StreamLimits limits);

  // Runs the request to its end, and counts it by the HTTP status the client got
  // (kClientClosed when it left before any).
  asio::awaitable<void> run(Backends& backends);

 private:
  asio::awaitable<void> leg(Leg leg, const Backend& b, const Json& body);
  asio::awaitable<void> relay(Leg leg, const Backend& b, LegMailbox& mailbox);
  // Rewrites one event into `out`; false when it broke the protocol (failure_ says how).
  bool take(Leg leg, const Backend& b, const LegEvent& e, std::vector<std::string>& out);
  asio::awaitable<void> finish(Leg leg, const Backend& b, const LegResult& result);
  // Sends events, starting the client's stream first if need be; false when the client left.
  asio::awaitable<bool> send(const std::vector<std::string>& events);
  // Ends the client's answer with an error: a whole response before the stream started,
  // else an error event, [DONE] and the end of the stream.
  asio::awaitable<void> fail(const std::string& body, const http::Response& whole);
  asio::awaitable<void> fail_gateway(Leg leg, const std::string& message);
  void time_text(http::Clock::time_point at);

  http::Exchange& ex_;
  const PdRequest& request_;
  ProxyMetrics& metrics_;
  StreamLimits limits_;
  StreamRewriter rewriter_;
  bool ended_ = false;           // the client's answer is complete
  bool decode_started_ = false;  // D sent its first event: it has the KV and owns the lease
  std::string failure_;
  std::optional<http::Clock::time_point> last_text_;
};

}  // namespace moe::proxy
