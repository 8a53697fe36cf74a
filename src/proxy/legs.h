#pragma once
// The proxy's calls to its instances: a leg's request, its answer whole or event by event,
// and the lease release. None of them throws, so each can race the client's disconnect
// (a racing operation that threw would leave the race waiting on the other).
#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "http/http_client.h"
#include "http/types.h"
#include "proxy/backends.h"
#include "proxy/merge.h"
#include "proxy/policy/routing_request.h"
#include "proxy/proxy_metrics.h"

namespace moe::proxy {

// What one client request carries through its legs.
struct PdRequest {
  Api api = Api::kCompletion;
  std::string target;         // "/v1/completions" or "/v1/chat/completions", the same at P and D
  Json body;                  // the client's
  std::string authorization;  // the client's Authorization header, passed on as is
  Identity id;
  http::Clock::time_point arrived;
  routing::RoutingRequest routing;  // what routing knows of it (request_estimate.h)
  std::optional<std::vector<int32_t>> prompt_ids;  // with --tokenizer: the instances' own ids
  std::map<std::string, int64_t> matched_prefix;   // prompt tokens each instance held on arrival (prefix_index.h)
};

struct LegResult {
  std::optional<http::HttpResponse> response;  // the instance's answer
  std::string failure;                         // without one: why, naming the leg and the instance
};

// A leg's request: the path, the JSON body, and the client's Authorization.
http::HttpRequest leg_request(const PdRequest& r, const Json& body);

// "prefill instance http://... answered outside the P/D protocol: <what>"
std::string protocol_failure(Leg leg, const Backend& b, const std::string& what);

// The whole answer, through the instance's pooled connections.
asio::awaitable<LegResult> fetch_leg(Leg leg, const Backend& b, http::HttpRequest request);

// Streams: each read's events go to `on_events`; the result's response has no body when
// they were streamed.
asio::awaitable<LegResult> stream_leg(Leg leg, const Backend& b, http::HttpRequest request,
                                      const http::EventBatchHandler& on_events);

// The instance's own answer, relayed to the client as is.
http::Response relayed(const http::HttpResponse& answer);

// Fire and forget: asks P to free a hand-off's KV blocks now, rather than when their lease
// runs out, because no decode instance will take them.
void release_handoff(asio::any_io_executor ex, const Backend& p, const Json& handoff, const std::string& authorization,
                     std::chrono::milliseconds timeout);

}  // namespace moe::proxy
