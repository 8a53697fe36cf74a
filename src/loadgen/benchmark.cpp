#include "loadgen/benchmark.h"

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <exception>

#include "loadgen/arrivals.h"

namespace moe::loadgen {

namespace asio = boost::asio;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string excerpt(const std::string& body) {
  constexpr size_t kMax = 500;
  return body.size() <= kMax ? body : body.substr(0, kMax) + "...";
}

HttpRequest make_request(const BenchmarkOptions& o, const SampleRequest& r) {
  HttpRequest req;
  req.target = endpoint_path(o.endpoint);
  req.body = request_body(o.endpoint, r, o.request).dump();
  if (!o.api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + o.api_key);
  return req;
}

// Sends one request and follows its stream; never throws.
asio::awaitable<RequestResult> send(HttpClient& client, const BenchmarkOptions& o, const SampleRequest& r,
                                    Clock::time_point t0) {
  const Clock::time_point sent = Clock::now();
  StreamRecorder recorder(o.endpoint, sent);
  RequestResult result;
  try {
    const HttpResponse response = co_await client.stream(make_request(o, r), [&](const SseEvent& e, Clock::time_point t) {
      recorder.on_event(e.data, t);
      return true;
    });
    const Clock::time_point ended = Clock::now();
    if (response.streamed) {
      result = recorder.finish(ended, r.prompt_len);
    } else {
      result.error = response.status / 100 == 2
                         ? fmt::format("the server answered '{}' instead of an event stream", response.content_type)
                         : fmt::format("HTTP {}: {}", response.status, excerpt(response.body));
      result.e2e_s = seconds(ended - sent);
    }
  } catch (const std::exception& e) {
    result.success = false;
    result.error = e.what();
    result.e2e_s = seconds(Clock::now() - sent);
  }
  result.start_s = seconds(sent - t0);
  co_return result;
}

Clock::duration to_duration(double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); }

// Connection failures (and 503, what a server loading its model answers) are retried
// until the deadline; anything else ends the wait with its message.
struct Attempt {
  std::string error;
  bool retry = false;
};

asio::awaitable<void> wait_a_moment() {
  asio::steady_timer pause(co_await asio::this_coro::executor, std::chrono::milliseconds(500));
  co_await pause.async_wait(kTuple);
}

asio::awaitable<std::string> served_model(HttpClient& client, const BenchmarkOptions& o, Clock::time_point deadline) {
  HttpRequest req;
  req.method = "GET";
  req.target = "/v1/models";
  if (!o.api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + o.api_key);
  for (;;) {
    Attempt a;
    try {
      const HttpResponse r = co_await client.fetch(req);
      if (r.status == 200) {
        const auto j = nlohmann::json::parse(r.body, nullptr, false);
        if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
            j["data"][0].is_object() && j["data"][0].contains("id") && j["data"][0]["id"].is_string())
          co_return j["data"][0]["id"].get<std::string>();
        a.error = fmt::format("the answer lists no model: {}", excerpt(r.body));
      } else {
        a.error = fmt::format("HTTP {}: {}", r.status, excerpt(r.body));
        a.retry = r.status == 503;
      }
    } catch (const ConnectError& e) {
      a = {e.what(), true};
    } catch (const Error& e) {
      a.error = e.what();
    }
    if (!a.retry || Clock::now() >= deadline)
      fail("no --model was given and asking the server failed (GET {}/v1/models): {}", client.base().str(), a.error);
    co_await wait_a_moment();
  }
}

asio::awaitable<void> test_request(HttpClient& client, const BenchmarkOptions& o, SampleRequest r,
                                   Clock::time_point deadline) {
  r.output_len = std::min<int64_t>(r.output_len, 8);
  const HttpRequest req = make_request(o, r);
  for (;;) {
    Attempt a;
    try {
      StreamRecorder recorder(o.endpoint, Clock::now());
      const HttpResponse response = co_await client.stream(req, [&](const SseEvent& e, Clock::time_point t) {
        recorder.on_event(e.data, t);
        return true;
      });
      if (!response.streamed) {
        a.error = response.status / 100 == 2
                      ? fmt::format("the server answered '{}' instead of an event stream", response.content_type)
                      : fmt::format("HTTP {}: {}", response.status, excerpt(response.body));
        a.retry = response.status == 503;
      } else if (RequestResult res = recorder.finish(Clock::now(), r.prompt_len); !res.success) {
        a.error = res.error;
      }
    } catch (const ConnectError& e) {
      a = {e.what(), true};
    } catch (const Error& e) {
      a.error = e.what();
    }
    if (a.error.empty()) co_return;
    if (!a.retry || Clock::now() >= deadline)
      fail("the test request to {}{} failed, so the benchmark did not start: {}", client.base().str(),
           endpoint_path(o.endpoint), a.error);
    co_await wait_a_moment();
  }
}

asio::awaitable<void> drive(HttpClient& client, BenchmarkOptions o, const std::vector<SampleRequest>& requests,
                            const ProgressFn& progress, BenchmarkRun& run) {
  const auto ex = co_await asio::this_coro::executor;
  const Clock::time_point ready_deadline = Clock::now() + to_duration(o.ready_timeout_s);
  if (o.request.model.empty()) o.request.model = co_await served_model(client, o, ready_deadline);
  run.model = o.request.model;
  co_await test_request(client, o, requests.front(), ready_deadline);
  const std::vector<double> offsets = arrival_offsets(requests.size(), o.request_rate, o.burstiness, o.seed);
  run.results.resize(requests.size());
  size_t in_flight = 0, done = 0;
  // Woken (cancelled) whenever a request ends, like a condition variable.
  asio::steady_timer request_ended(ex);
  const Clock::time_point t0 = Clock::now();
  asio::steady_timer arrival(ex);
  for (size_t i = 0; i < requests.size(); ++i) {
    arrival.expires_at(t0 + to_duration(offsets[i]));
    co_await arrival.async_wait(kTuple);
    while (o.max_concurrency > 0 && in_flight >= o.max_concurrency) {
      request_ended.expires_at(Clock::time_point::max());
      co_await request_ended.async_wait(kTuple);
    }
    ++in_flight;
    asio::co_spawn(ex, send(client, o, requests[i], t0), [&, i](std::exception_ptr, RequestResult result) {
      run.results[i] = std::move(result);
      --in_flight;
      ++done;
      if (progress) progress(done, requests.size());
      request_ended.cancel();
    });
  }
  while (done < requests.size()) {
    request_ended.expires_at(Clock::time_point::max());
    co_await request_ended.async_wait(kTuple);
  }
  run.duration_s = seconds(Clock::now() - t0);
}

}  // namespace

BenchmarkRun run_benchmark(const BenchmarkOptions& o, const std::vector<SampleRequest>& requests,
                           const ProgressFn& progress) {
  if (requests.empty()) fail("no requests to send (--num-prompts must be at least 1)");
  asio::io_context io(1);
  HttpClient client(parse_url(o.base_url), HttpClientOptions{o.timeout});
  BenchmarkRun run;
  std::exception_ptr failure;
  asio::co_spawn(io, drive(client, o, requests, progress, run), [&](std::exception_ptr e) { failure = e; });
  io.run();
  if (failure) std::rethrow_exception(failure);
  return run;
}

}  // namespace moe::loadgen
