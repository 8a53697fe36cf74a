#include "proxy/stream_relay.h"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>
#include <fmt/format.h>

#include "proxy/errors.h"

// The coroutines here keep temporaries out of co_await expressions (they are locals first):
// GCC 12 destroys some such temporaries twice.

namespace moe::proxy {

namespace {

// An instance's error answer as one SSE event: its own error object when it sent one.
std::string error_event(Leg leg, const Backend& b, const http::HttpResponse& answer) {
  const Json body = Json::parse(answer.body, nullptr, false);
  if (member(body, "error")) return body.dump(-1, ' ', false, Json::error_handler_t::replace);
  return error_body(bad_gateway(fmt::format("{} instance {} answered HTTP {}: {}", leg_name(leg), b.url, answer.status, answer.body)));
}

}  // namespace

StreamRelay::StreamRelay(http::Exchange& ex, const PdRequest& request, ProxyMetrics& metrics, StreamLimits limits)
    : ex_(ex), request_(request), metrics_(metrics), limits_(limits), rewriter_(request.id) {}

asio::awaitable<void> StreamRelay::run(Backends& backends) {
  const Backend& p = backends.next_prefill();
  const Json p_body = prefill_body(request_.body);
  co_await leg(Leg::kPrefill, p, p_body);
  if (rewriter_.handed_off()) {
    if (!ended_ && !ex_.client_gone()) {
      const Json d_body = decode_body(request_.body, rewriter_.handoff());
      co_await leg(Leg::kDecode, backends.next_decode(), d_body);
    }
    const auto executor = co_await asio::this_coro::executor;
    if (!decode_started_) release_handoff(executor, p, rewriter_.handoff(), request_.authorization, limits_.release_timeout);
  }
  if (!ex_.responded()) metrics_.count_request(kClientClosed);
}

asio::awaitable<void> StreamRelay::leg(Leg leg, const Backend& b, const Json& body) {
  using namespace asio::experimental::awaitable_operators;
  const auto executor = co_await asio::this_coro::executor;
  http::HttpClient client(executor, b.base, http::HttpClientOptions{limits_.timeout});
  auto mailbox = std::make_shared<LegMailbox>(executor);
  http::HttpRequest request = leg_request(request_, body);
  co_await (stream_leg(client, leg, b, std::move(request), mailbox, limits_.timeout) || relay(leg, b, *mailbox));
  mailbox->close();
}

asio::awaitable<void> StreamRelay::relay(Leg leg, const Backend& b, LegMailbox& mailbox) {
  for (;;) {
    std::optional<std::vector<LegItem>> batch = co_await ex_.unless_client_gone(mailbox.receive());
    if (!batch) co_return;
    // The batch is rewritten first and sent in one write, then ended if the leg ended.
    std::vector<std::string> out;
    const LegResult* end = nullptr;
    bool broken = false;
    for (const LegItem& item : *batch) {
      end = std::get_if<LegResult>(&item);
      if (end) break;
      broken = !take(leg, b, std::get<LegEvent>(item), out);
      if (broken) break;
    }
    const bool sent = co_await send(out);
    if (!sent) co_return;
    if (broken) {
      co_await fail_gateway(leg, failure_);
      co_return;
    }
    if (end) {
      co_await finish(leg, b, *end);
      co_return;
    }
  }
}

bool StreamRelay::take(Leg leg, const Backend& b, const LegEvent& e, std::vector<std::string>& out) {
  Relay r;
  try {
    r = leg == Leg::kPrefill ? rewriter_.prefill_event(e.data) : rewriter_.decode_event(e.data);
  } catch (const std::exception& err) {
    failure_ = protocol_failure(leg, b, err.what());
    return false;
  }
  if (leg == Leg::kDecode) decode_started_ = true;
  if (r.text) time_text(e.at);
  if (r.data) out.push_back(std::move(*r.data));
  return true;
}

asio::awaitable<void> StreamRelay::finish(Leg leg, const Backend& b, const LegResult& result) {
  // P's part ended with its finish chunk; whatever it sent after is not the client's.
  if (leg == Leg::kPrefill && rewriter_.handed_off()) co_return;
  if (!result.response) {
    co_await fail_gateway(leg, result.failure);
    co_return;
  }
  const http::HttpResponse& answer = *result.response;
  if (answer.streamed && rewriter_.done()) {
    ended_ = true;
    co_await ex_.end_events();
    co_return;
  }
  if (answer.streamed) {
    const std::string message = protocol_failure(leg, b, "its event stream ended before [DONE]");
    co_await fail_gateway(leg, message);
    co_return;
  }
  if (answer.status / 100 == 2) {
    const std::string message = protocol_failure(leg, b, fmt::format("HTTP {} without an event stream", answer.status));
    co_await fail_gateway(leg, message);
    co_return;
  }
  if (answer.status >= 500) metrics_.count_leg_failure(leg);
  const std::string event = error_event(leg, b, answer);
  const http::Response whole = relayed(answer);
  co_await fail(event, whole);
}

// No early co_return: GCC 12 miscompiles a coroutine returning a value whose first
// statement may return before any co_await.
asio::awaitable<bool> StreamRelay::send(const std::vector<std::string>& events) {
  bool open = !ex_.client_gone();
  if (open && !events.empty() && !ex_.responded()) {
    // Counted before it is sent: a client that has its answer may read /metrics at once.
    metrics_.count_request(200);
    open = co_await ex_.start_events();
  }
  if (open && !events.empty()) open = co_await ex_.send_events(events);
  co_return open;
}

asio::awaitable<void> StreamRelay::fail(const std::string& event, const http::Response& whole) {
  ended_ = true;
  if (!ex_.responded()) {
    metrics_.count_request(int(whole.result_int()));
    co_await ex_.respond(whole);
    co_return;
  }
  const std::vector<std::string> last{event, std::string("[DONE]")};
  if (co_await ex_.send_events(last)) co_await ex_.end_events();
}

asio::awaitable<void> StreamRelay::fail_gateway(Leg leg, const std::string& message) {
  metrics_.count_leg_failure(leg);
  const ApiError e = bad_gateway(message);
  const std::string event = error_body(e);
  const http::Response whole = error_response(e);
  co_await fail(event, whole);
}

void StreamRelay::time_text(http::Clock::time_point at) {
  const auto seconds = [](http::Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  if (last_text_) metrics_.observe_tpot(seconds(at - *last_text_));
  else metrics_.observe_ttft(seconds(at - request_.arrived));
  last_text_ = at;
}

}  // namespace moe::proxy
