#include "proxy/legs.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <fmt/format.h>

#include "http/deadline.h"

namespace moe::proxy {

namespace {

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// `on_events`: stream to it; null: fetch the answer whole.
asio::awaitable<LegResult> call(Leg leg, const Backend& b, http::HttpRequest request,
                                const http::EventBatchHandler* on_events) {
  // Shared with the backend, which an instance removed meanwhile may no longer hold.
  const std::shared_ptr<http::HttpClient> client = b.connections;
  LegResult r;
  try {
    if (on_events) {
      r.response = co_await client->stream_batches(std::move(request), *on_events);
    } else {
      r.response = co_await client->fetch(std::move(request));
    }
  } catch (const http::ConnectError& e) {
    r.failure = fmt::format("{} instance {} is unreachable: {}", leg_name(leg), b.url, e.what());
  } catch (const std::exception& e) {
    r.failure = fmt::format("{} instance {} failed: {}", leg_name(leg), b.url, e.what());
  }
  co_return r;
}

}  // namespace

http::HttpRequest leg_request(const PdRequest& r, const Json& body) {
  http::HttpRequest request;
  request.target = r.target;
  request.body = dump(body);
  if (!r.authorization.empty()) request.headers.emplace_back("Authorization", r.authorization);
  return request;
}

std::string protocol_failure(Leg leg, const Backend& b, const std::string& what) {
  return fmt::format("{} instance {} answered outside the P/D protocol: {}", leg_name(leg), b.url, what);
}

asio::awaitable<LegResult> fetch_leg(Leg leg, const Backend& b, http::HttpRequest request) {
  co_return co_await call(leg, b, std::move(request), nullptr);
}

asio::awaitable<LegResult> stream_leg(Leg leg, const Backend& b, http::HttpRequest request,
                                      const http::EventBatchHandler& on_events) {
  co_return co_await call(leg, b, std::move(request), &on_events);
}

http::Response relayed(const http::HttpResponse& answer) {
  http::Response res;
  res.version(11);
  res.result(unsigned(answer.status));
  if (!answer.content_type.empty()) res.set(http::Field::content_type, answer.content_type);
  res.body() = answer.body;
  return res;
}

void release_handoff(asio::any_io_executor ex, const Backend& p, const Json& handoff, const std::string& authorization,
                     std::chrono::milliseconds timeout) {
  const Json* id = member(handoff, "remote_request_id");
  if (!id) return;
  http::HttpRequest request;
  request.target = "/internal/kv/release";
  request.body = dump(Json{{"remote_request_id", *id}});
  if (!authorization.empty()) request.headers.emplace_back("Authorization", authorization);
  // Owns everything it uses (the backend's copy holds the connections): it outlives the
  // handler that starts it.
  auto release = [](http::HttpRequest req, Backend b, std::chrono::milliseconds limit) -> asio::awaitable<void> {
    const std::optional<LegResult> answered = co_await http::within(limit, fetch_leg(Leg::kPrefill, b, std::move(req)));
  };
  asio::co_spawn(ex, release(std::move(request), p, timeout), asio::detached);
}

}  // namespace moe::proxy
