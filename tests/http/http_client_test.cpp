// The HTTP client against a local streaming server: events with their arrival times,
// whole responses, keep-alive reuse, a pooled connection the server dropped, stopping a
// stream early, and connection errors.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include "support/fake_openai_server.h"
#include "http/http_client.h"

namespace moe::http {
namespace {

namespace asio = boost::asio;
using moe::testing::FakeOpenAiServer;

struct Seen {
  std::string data;
  Clock::time_point at;
};

// Runs `body` with a client of `url` on a fresh io_context until it finishes.
void with_client(const std::string& url, std::function<asio::awaitable<void>(HttpClient&)> body) {
  asio::io_context io;
  HttpClient client(parse_url(url), HttpClientOptions{std::chrono::seconds(10)});
  std::exception_ptr failure;
  asio::co_spawn(io, body(client), [&](std::exception_ptr e) { failure = e; });
  io.run();
  if (failure) std::rethrow_exception(failure);
}

HttpRequest completion(int max_tokens, const std::string& model = "m") {
  HttpRequest r;
  r.target = "/v1/completions";
  r.body = nlohmann::json{{"model", model}, {"prompt", {1, 2, 3}}, {"max_tokens", max_tokens}}.dump();
  return r;
}

TEST(ParseUrl, HostPortAndPath) {
  const Url u = parse_url("http://127.0.0.1:8000");
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, "8000");
  EXPECT_EQ(u.path, "");
  const Url v = parse_url("http://example.org/api/");
  EXPECT_EQ(v.port, "80");
  EXPECT_EQ(v.path, "/api");
  EXPECT_EQ(v.str(), "http://example.org:80/api");
  const Url w = parse_url("http://[::1]:9000");
  EXPECT_EQ(w.host, "::1");
  EXPECT_EQ(w.port, "9000");
  EXPECT_THROW(parse_url("https://example.org"), Error);
  EXPECT_THROW(parse_url("localhost:8000"), Error);
  EXPECT_THROW(parse_url("http://:8000"), Error);
  EXPECT_THROW(parse_url("http://h:99999"), Error);
  EXPECT_THROW(parse_url("http://h:80x"), Error);
}

TEST(HttpClient, StreamsEventsWithTheirArrivalTimes) {
  FakeOpenAiServer server(std::chrono::milliseconds(20));
  std::vector<Seen> seen;
  HttpResponse response;
  const Clock::time_point sent = Clock::now();
  with_client(server.url(), [&](HttpClient& c) -> asio::awaitable<void> {
    response = co_await c.stream(completion(4), [&](const SseEvent& e, Clock::time_point t) {
      seen.push_back({e.data, t});
      return true;
    });
  });
  EXPECT_EQ(response.status, 200);
  EXPECT_TRUE(response.streamed);
  EXPECT_TRUE(response.body.empty());
  ASSERT_EQ(seen.size(), 6u);  // 4 tokens, usage, [DONE]; the comment is not an event
  EXPECT_EQ(nlohmann::json::parse(seen[1].data)["choices"][0]["text"], " w1");  // the split one
  EXPECT_EQ(seen[5].data, "[DONE]");
  // The server waits 20 ms before each token, so token i cannot arrive before (i + 1) * 20
  // ms (a busy machine may delay reads and stamp several events alike, never earlier).
  for (int i = 0; i < 4; ++i) EXPECT_GE(seen[i].at - sent, std::chrono::milliseconds(20 * (i + 1))) << i;
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_GE(seen[i].at, seen[i - 1].at) << i;
}

TEST(HttpClient, ReusesTheConnectionAndReadsErrorsWhole) {
  FakeOpenAiServer server;
  HttpResponse ok, rejected, missing;
  with_client(server.url(), [&](HttpClient& c) -> asio::awaitable<void> {
    ok = co_await c.stream(completion(2), [](const SseEvent&, Clock::time_point) { return true; });
    rejected = co_await c.stream(completion(2, "reject"), [](const SseEvent&, Clock::time_point) {
      ADD_FAILURE() << "an error body is not an event stream";
      return true;
    });
    HttpRequest get = completion(1);
    get.target = "/nowhere";
    missing = co_await c.fetch(get);
  });
  EXPECT_TRUE(ok.streamed);
  EXPECT_EQ(rejected.status, 400);
  EXPECT_FALSE(rejected.streamed);
  EXPECT_NE(rejected.body.find("model 'reject' does not exist"), std::string::npos);
  EXPECT_EQ(rejected.content_type, "application/json");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(server.requests(), 3);
  EXPECT_EQ(server.connections(), 1);
}

TEST(HttpClient, ResendsOnAFreshConnectionWhenTheServerDroppedTheIdleOne) {
  FakeOpenAiServer server;
  server.drop_after_response(true);
  int events = 0;
  with_client(server.url(), [&](HttpClient& c) -> asio::awaitable<void> {
    for (int i = 0; i < 3; ++i) {
      const HttpResponse r = co_await c.stream(completion(1), [&](const SseEvent&, Clock::time_point) {
        ++events;
        return true;
      });
      EXPECT_EQ(r.status, 200);
    }
  });
  EXPECT_EQ(events, 9);
  EXPECT_EQ(server.requests(), 3);
  EXPECT_EQ(server.connections(), 3);
}

TEST(HttpClient, StoppingAStreamClosesItsConnection) {
  FakeOpenAiServer server;
  int events = 0;
  with_client(server.url(), [&](HttpClient& c) -> asio::awaitable<void> {
    co_await c.stream(completion(50), [&](const SseEvent&, Clock::time_point) { return ++events < 2; });
    co_await c.stream(completion(1), [](const SseEvent&, Clock::time_point) { return true; });
  });
  EXPECT_EQ(events, 2);
  EXPECT_EQ(server.connections(), 2);
}

TEST(HttpClient, RefusedConnectionIsAConnectError) {
  unsigned short port;
  {
    asio::io_context io;
    asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
    port = a.local_endpoint().port();
  }
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  try {
    with_client(url, [&](HttpClient& c) -> asio::awaitable<void> { co_await c.fetch(completion(1)); });
    ADD_FAILURE() << "no error";
  } catch (const ConnectError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot connect to " + url), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moe::http
