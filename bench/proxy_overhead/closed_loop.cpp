#include "closed_loop.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <memory>

#include "http/http_client.h"

namespace moe::bench {

namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using std::chrono::duration;

// The first "text" member's value: the stub's texts need no escapes, and neither the proxy
// nor nginx adds any.
std::string answer_text(const std::string& json) {
  constexpr std::string_view key = R"("text":")";
  const size_t at = json.find(key);
  if (at == std::string::npos) return "";
  const size_t from = at + key.size();
  const size_t to = json.find('"', from);
  return to == std::string::npos ? "" : json.substr(from, to - from);
}

std::string excerpt(const std::string& s) { return s.size() > 300 ? s.substr(0, 300) + "..." : s; }

// One request; what was wrong with its answer, or "" when it was right.
asio::awaitable<std::string> one_request(http::HttpClient& client, const LoadSpec& spec) {
  http::HttpRequest req;
  req.target = "/v1/completions";
  req.body = spec.body;
  try {
    if (!spec.stream) {
      const http::HttpResponse res = co_await client.fetch(std::move(req));
      if (res.status != 200) co_return fmt::format("HTTP {}: {}", res.status, excerpt(res.body));
      if (answer_text(res.body) != spec.expected_text) co_return "unexpected answer: " + excerpt(res.body);
      co_return "";
    }
    std::string text;
    bool done = false;
    const http::HttpResponse res = co_await client.stream(std::move(req), [&](const http::SseEvent& e, http::Clock::time_point) {
      if (e.data == "[DONE]") done = true;
      else text += answer_text(e.data);
      return true;
    });
    if (!res.streamed) co_return fmt::format("HTTP {} without an event stream: {}", res.status, excerpt(res.body));
    if (!done) co_return "the event stream ended without [DONE]";
    if (text != spec.expected_text) co_return "unexpected streamed text: " + excerpt(text);
    co_return "";
  } catch (const std::exception& e) {
    co_return std::string(e.what());
  }
}

std::unique_ptr<http::HttpClient> client_for(const LoadSpec& spec) {
  http::HttpClientOptions options;
  options.idle_timeout = std::chrono::seconds(30);
  return std::make_unique<http::HttpClient>(http::parse_url(spec.url), options);
}

bool stopped(const LoadSpec& spec) { return spec.stop && *spec.stop; }

uint64_t backend_count(const LoadSpec& spec) { return spec.backend_requests ? spec.backend_requests() : 0; }

// Sends one request and records it in `r`; true when it was answered right.
asio::awaitable<bool> record(http::HttpClient& client, const LoadSpec& spec, LoadResult& r, Clock::time_point& t0,
                             Clock::time_point& t1) {
  ++r.sent;
  t0 = Clock::now();
  const std::string error = co_await one_request(client, spec);
  t1 = Clock::now();
  if (error.empty()) co_return true;
  if (r.errors++ == 0) r.first_error = error;
  co_return false;
}

double ms(Clock::time_point from, Clock::time_point to) { return duration<double, std::milli>(to - from).count(); }

}  // namespace

LoadResult run_closed_loop(const LoadSpec& spec) {
  asio::io_context ioc;
  const std::unique_ptr<http::HttpClient> client = client_for(spec);
  LoadResult r;
  const bool timed = spec.requests == 0;
  const Clock::time_point window_begin =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(duration<double>(spec.warmup_s));
  const Clock::time_point window_end =
      window_begin + std::chrono::duration_cast<Clock::duration>(duration<double>(spec.duration_s));
  Clock::time_point first_counted_send{}, last_counted_end{};

  auto worker = [&]() -> asio::awaitable<void> {
    while (!stopped(spec)) {
      if (timed ? Clock::now() >= window_end : r.sent >= spec.warmup_requests + spec.requests) break;
      const bool warmup = !timed && r.sent < spec.warmup_requests;
      Clock::time_point t0, t1;
      if (!co_await record(*client, spec, r, t0, t1)) continue;
      if (timed ? t1 < window_begin || t1 >= window_end : warmup) continue;
      if (r.latencies_ms.empty()) first_counted_send = t0;
      last_counted_end = t1;
      r.latencies_ms.push_back(ms(t0, t1));
    }
  };
  const uint64_t before = backend_count(spec);
  for (int i = 0; i < spec.concurrency; ++i) asio::co_spawn(ioc, worker(), asio::detached);
  ioc.run();
  r.backend_requests = backend_count(spec) - before;
  r.elapsed_s = timed ? spec.duration_s : duration<double>(last_counted_end - first_counted_send).count();
  return r;
}

std::vector<LoadResult> run_in_turns(const std::vector<LoadSpec>& specs) {
  asio::io_context ioc;
  std::vector<std::unique_ptr<http::HttpClient>> clients;
  for (const LoadSpec& spec : specs) clients.push_back(client_for(spec));
  std::vector<LoadResult> results(specs.size());
  size_t turns = 0;
  for (const LoadSpec& spec : specs) turns = std::max(turns, spec.warmup_requests + spec.requests);

  auto worker = [&]() -> asio::awaitable<void> {
    for (size_t turn = 0; turn < turns && !(specs.empty() || stopped(specs[0])); ++turn) {
      for (size_t k = 0; k < specs.size(); ++k) {
        const LoadSpec& spec = specs[k];
        if (turn >= spec.warmup_requests + spec.requests) continue;
        LoadResult& r = results[k];
        const uint64_t before = backend_count(spec);
        Clock::time_point t0, t1;
        const bool answered = co_await record(*clients[k], spec, r, t0, t1);
        r.backend_requests += backend_count(spec) - before;
        if (!answered || turn < spec.warmup_requests) continue;
        r.latencies_ms.push_back(ms(t0, t1));
        r.elapsed_s += duration<double>(t1 - t0).count();
      }
    }
  };
  asio::co_spawn(ioc, worker(), asio::detached);
  ioc.run();
  return results;
}

}  // namespace moe::bench
