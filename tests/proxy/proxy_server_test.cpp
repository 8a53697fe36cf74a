// The proxy in process, between a client and fake P and D instances (fake_instances.h):
// merged and streamed answers compared byte for byte, a request that ends at P, P's and D's
// errors relayed, no D up (503, or an error event once streaming), n > 1, the API key,
// the lease release when the client leaves after the hand-off, /v1/models, /health and
// /metrics.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <regex>
#include <thread>

#include "fake_instances.h"
#include "http/http_client.h"

namespace moe::proxy {
namespace {

using testing::FakeInstance;
using testing::head;
using Kind = FakeInstance::Kind;

struct Answer {
  int status = 0;
  std::string body;
  std::vector<std::string> events;
};

using Headers = std::vector<std::pair<std::string, std::string>>;

// One request from a client on its own io_context; with `on_event` it streams, and the
// handler's false closes the connection there.
Answer call(const std::string& url, http::HttpRequest request, std::function<bool(const std::string&)> on_event = {}) {
  asio::io_context io;
  http::HttpClient client(http::parse_url(url), http::HttpClientOptions{std::chrono::seconds(5)});
  Answer a;
  std::exception_ptr failure;
  auto run = [&]() -> asio::awaitable<void> {
    http::HttpResponse r;
    if (on_event) {
      r = co_await client.stream(std::move(request), [&](const http::SseEvent& e, http::Clock::time_point) {
        a.events.push_back(e.data);
        return on_event(e.data);
      });
    } else {
      r = co_await client.fetch(std::move(request));
    }
    a.status = r.status;
    a.body = r.body;
  };
  asio::co_spawn(io, run(), [&](std::exception_ptr e) { failure = e; });
  io.run();
  if (failure) std::rethrow_exception(failure);
  return a;
}

http::HttpRequest post(const std::string& target, const std::string& body, Headers headers = {}) {
  http::HttpRequest r;
  r.target = target;
  r.body = body;
  r.headers = std::move(headers);
  return r;
}

http::HttpRequest get(const std::string& target) {
  http::HttpRequest r;
  r.method = "GET";
  r.target = target;
  return r;
}

const auto kAll = [](const std::string&) { return true; };

// A port that refuses connections: bound but not listening, so that it stays reserved (no
// other server, nor a connection's own end, can take it) for as long as this lives.
class DeadPort {
 public:
  DeadPort() : socket_(io_) {
    socket_.open(asio::ip::tcp::v4());
    socket_.bind({asio::ip::make_address("127.0.0.1"), 0});
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(socket_.local_endpoint().port()); }

 private:
  asio::io_context io_;
  asio::ip::tcp::socket socket_;
};

class Deployment {
 public:
  explicit Deployment(Kind decode = Kind::kDecode, const std::string& api_key = "")
      : p_(Kind::kPrefill), d_(decode), proxy_(config({p_.url()}, {d_.url()}, api_key)), server_(server_config(), proxy_.router(), &ProxyServer::http_error) {
    server_.start();
  }
  Deployment(const std::string& decode_url, const std::string& api_key = "")
      : p_(Kind::kPrefill), d_(Kind::kDecode), proxy_(config({p_.url()}, {decode_url}, api_key)),
        server_(server_config(), proxy_.router(), &ProxyServer::http_error) {
    server_.start();
  }
  ~Deployment() { server_.stop(); }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_.port()); }
  FakeInstance& p() { return p_; }
  FakeInstance& d() { return d_; }

  static ProxyConfig config(std::vector<std::string> prefill, std::vector<std::string> decode, const std::string& api_key) {
    ProxyConfig c;
    for (const std::string& url : prefill) c.instances.push_back({"prefill", url, InstanceRole::prefill, 1.0});
    for (const std::string& url : decode) c.instances.push_back({"decode", url, InstanceRole::decode, 1.0});
    c.api_key = api_key;
    c.timeout = std::chrono::seconds(5);
    c.health.timeout = std::chrono::milliseconds(500);
    c.health.interval = std::chrono::seconds(60);  // the first probe only
    c.dispatch.queue_timeout = std::chrono::milliseconds(200);
    c.release_timeout = std::chrono::seconds(1);
    return c;
  }

 private:
  static http::ServerConfig server_config() {
    http::ServerConfig c;
    c.port = 0;
    c.io_threads = 2;
    return c;
  }

  FakeInstance p_, d_;
  ProxyServer proxy_;
  http::HttpServer server_;
};

// The proxy's id and created, taken from its answer or first event, for the expected text;
// checked to be the proxy's own, not the fakes' ("p", "d"; created 1, 2).
std::string own_head(bool chat, bool chunk, const std::string& answer) {
  const Json j = Json::parse(answer);
  const std::string id = j["id"].get<std::string>();
  EXPECT_TRUE(std::regex_match(id, std::regex(chat ? "chatcmpl-[0-9a-f]{32}" : "cmpl-[0-9a-f]{32}"))) << id;
  EXPECT_GT(j["created"].get<int64_t>(), 1600000000);
  return head(chat, chunk, id, j["created"].get<int64_t>());
}

const std::string kCompletion = R"({"model":"m","prompt":"Hi","max_tokens":3,"echo":false})";
const std::string kChat = R"({"model":"m","messages":[{"role":"user","content":"Hi"}],"max_tokens":3})";

TEST(Proxy, NonStreamedCompletionIsPsTextThenDs) {
  Deployment dep;
  const Answer a = call(dep.url(), post("/v1/completions", kCompletion));
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.body, own_head(false, false, a.body) + testing::whole_choice(false, " A B C", "stop") + "," + testing::usage(2, 3) + "}");
  const auto p = dep.p().wait_for("/v1/completions");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].body, R"({"model":"m","prompt":"Hi","max_tokens":3,"echo":false,"kv_transfer_params":{"do_remote_decode":true}})");
  const auto d = dep.d().wait_for("/v1/completions");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].body, R"({"model":"m","prompt":"Hi","max_tokens":3,"kv_transfer_params":)" + testing::kHandoff + "}");
}

TEST(Proxy, NonStreamedChatIsPsContentThenDs) {
  Deployment dep;
  const Answer a = call(dep.url(), post("/v1/chat/completions", kChat));
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.body, own_head(true, false, a.body) + testing::whole_choice(true, " A B C", "stop") + "," + testing::usage(2, 3) + "}");
}

TEST(Proxy, StreamedCompletionRelaysPThenD) {
  Deployment dep;
  const Answer a = call(dep.url(), post("/v1/completions", R"({"prompt":"Hi","stream":true})"), kAll);
  ASSERT_EQ(a.status, 200);
  ASSERT_EQ(a.events.size(), 6u);
  const std::string h = own_head(false, true, a.events[0]);
  const std::vector<std::string> expected{h + testing::chunk_choice(false, " A") + "}", h + testing::chunk_choice(false, " B") + "}",
                                          h + testing::chunk_choice(false, " C") + "}", h + testing::finish_choice(false, "stop") + "}",
                                          h + R"("choices":[],)" + testing::usage(2, 3) + "}", "[DONE]"};
  EXPECT_EQ(a.events, expected);
  const auto d = dep.d().wait_for("/v1/completions");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(Json::parse(d[0].body)["stream"], true);
}

TEST(Proxy, StreamedChatHasPsRoleChunkOnly) {
  Deployment dep;
  const Answer a = call(dep.url(), post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"stream":true})"), kAll);
  ASSERT_EQ(a.status, 200);
  ASSERT_EQ(a.events.size(), 7u);
  const std::string h = own_head(true, true, a.events[0]);
  const std::vector<std::string> expected{h + testing::role_chunk() + "}",
                                          h + testing::chunk_choice(true, " A") + "}",
                                          h + testing::chunk_choice(true, " B") + "}",
                                          h + testing::chunk_choice(true, " C") + "}",
                                          h + testing::finish_choice(true, "stop") + "}",
                                          h + R"("choices":[],)" + testing::usage(2, 3) + "}",
                                          "[DONE]"};
  EXPECT_EQ(a.events, expected);
}

TEST(Proxy, ARequestThatEndsAtPIsPsAnswer) {
  Deployment dep;
  const Answer a = call(dep.url(), post("/v1/completions", R"({"prompt":"short"})"));
  ASSERT_EQ(a.status, 200);
  EXPECT_EQ(a.body, own_head(false, false, a.body) + testing::whole_choice(false, " A", "length") + "," + testing::usage(2, 1) + "}");
  const Answer s = call(dep.url(), post("/v1/completions", R"({"prompt":"short","stream":true})"), kAll);
  ASSERT_EQ(s.events.size(), 4u);
  const std::string h = own_head(false, true, s.events[0]);
  const std::vector<std::string> expected{h + testing::chunk_choice(false, " A") + "}", h + testing::finish_choice(false, "length") + "}",
                                          h + R"("choices":[],)" + testing::usage(2, 1) + "}", "[DONE]"};
  EXPECT_EQ(s.events, expected);
  EXPECT_EQ(dep.d().requests("/v1/completions"), 0u);
}

TEST(Proxy, PsErrorIsRelayed) {
  Deployment dep;
  for (const bool stream : {false, true}) {
    const std::string body = stream ? R"({"prompt":"reject","stream":true})" : R"({"prompt":"reject"})";
    const Answer a = stream ? call(dep.url(), post("/v1/completions", body), kAll) : call(dep.url(), post("/v1/completions", body));
    EXPECT_EQ(a.status, 400);
    EXPECT_EQ(a.body, testing::kReject);
  }
  EXPECT_EQ(dep.d().requests("/v1/completions"), 0u);
}

// The only D is down (its probe failed): no instance takes the decode leg within the queue
// timeout, 503, and P is told to free the hand-off's blocks.
TEST(Proxy, NoDecodeInstanceUpIs503AndReleasesTheLease) {
  const DeadPort port;
  const std::string dead = port.url();
  Deployment dep(dead);
  const Answer a = call(dep.url(), post("/v1/completions", kCompletion));
  EXPECT_EQ(a.status, 503);
  const Json error = Json::parse(a.body)["error"];
  EXPECT_TRUE(error["message"].get<std::string>().starts_with("no decode instance could take the request within 200 ms")) << a.body;
  EXPECT_EQ(error["code"], "no_instance_available");
  const auto released = dep.p().wait_for("/internal/kv/release");
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].body, R"({"remote_request_id":"req-7"})");

  // Streaming, P's part has gone out: the error comes as an event.
  const Answer s = call(dep.url(), post("/v1/completions", R"({"prompt":"Hi","stream":true})"), kAll);
  EXPECT_EQ(s.status, 200);
  ASSERT_EQ(s.events.size(), 3u);
  EXPECT_EQ(s.events[0], own_head(false, true, s.events[0]) + testing::chunk_choice(false, " A") + "}");
  EXPECT_EQ(Json::parse(s.events[1])["error"]["code"], "no_instance_available");
  EXPECT_EQ(s.events[2], "[DONE]");
  EXPECT_EQ(dep.p().wait_for("/internal/kv/release", 2).size(), 2u);

  const std::string metrics = call(dep.url(), get("/metrics")).body;
  EXPECT_NE(metrics.find("moengine:proxy_requests_total{model_name=\"\",status=\"503\"} 1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("moengine:proxy_requests_total{model_name=\"\",status=\"200\"} 1\n"), std::string::npos);
  EXPECT_NE(metrics.find("moengine:proxy_instance_up{model_name=\"\",instance=\"decode\",role=\"decode\"} 0\n"),
            std::string::npos);
}

TEST(Proxy, DsErrorIsRelayedAndReleasesTheLease) {
  Deployment dep;
  const Answer a = call(dep.url(), post("/v1/completions", R"({"prompt":"overload"})"));
  EXPECT_EQ(a.status, 503);
  EXPECT_EQ(a.body, testing::kOverloaded);
  EXPECT_EQ(dep.p().wait_for("/internal/kv/release").size(), 1u);

  // Streaming, P's part has gone out: D's error comes as an event.
  const Answer s = call(dep.url(), post("/v1/completions", R"({"prompt":"overload","stream":true})"), kAll);
  EXPECT_EQ(s.status, 200);
  ASSERT_EQ(s.events.size(), 3u);
  EXPECT_EQ(s.events[0], own_head(false, true, s.events[0]) + testing::chunk_choice(false, " A") + "}");
  EXPECT_EQ(s.events[1], testing::kOverloaded);
  EXPECT_EQ(s.events[2], "[DONE]");
  EXPECT_EQ(dep.p().wait_for("/internal/kv/release", 2).size(), 2u);
  const std::string metrics = call(dep.url(), get("/metrics")).body;
  EXPECT_NE(metrics.find("moengine:proxy_leg_failures_total{model_name=\"\",leg=\"decode\"} 2\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("moengine:proxy_requests_total{model_name=\"\",status=\"503\"} 1\n"), std::string::npos);
}

TEST(Proxy, MoreThanOneChoiceIs400) {
  Deployment dep;
  const Answer a = call(dep.url(), post("/v1/completions", R"({"prompt":"Hi","n":2})"));
  EXPECT_EQ(a.status, 400);
  EXPECT_EQ(a.body,
            R"({"error":{"message":"n > 1 is not supported behind the P/D proxy yet","type":"invalid_request_error","param":"n","code":"unsupported_value"}})");
  EXPECT_EQ(dep.p().requests("/v1/completions"), 0u);
}

TEST(Proxy, ApiKeyIsRequiredAndPassedOn) {
  Deployment dep(Kind::kDecode, "sekret");
  const Answer none = call(dep.url(), post("/v1/completions", kCompletion));
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(Json::parse(none.body)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(call(dep.url(), post("/v1/completions", kCompletion, {{"Authorization", "Bearer wrong"}})).status, 401);
  EXPECT_EQ(call(dep.url(), get("/v1/models")).status, 401);
  const Answer ok = call(dep.url(), post("/v1/completions", kCompletion, {{"Authorization", "Bearer sekret"}}));
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(dep.p().wait_for("/v1/completions").at(0).authorization, "Bearer sekret");
  EXPECT_EQ(dep.d().wait_for("/v1/completions").at(0).authorization, "Bearer sekret");
}

// The client leaves once P's part has reached it and D holds the request: D's connection is
// closed, and P is told to free the hand-off's blocks.
TEST(Proxy, ClientLeavingAfterTheHandOffCancelsDAndReleases) {
  Deployment dep(Kind::kHangingDecode);
  FakeInstance& d = dep.d();
  const Answer a = call(dep.url(), post("/v1/completions", R"({"prompt":"Hi","stream":true})"), [&](const std::string&) {
    d.wait_for("/v1/completions");
    return false;
  });
  ASSERT_EQ(a.events.size(), 1u);
  const auto released = dep.p().wait_for("/internal/kv/release");
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].body, R"({"remote_request_id":"req-7"})");
  for (int i = 0; i < 500 && d.hung_up() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(d.hung_up(), 1);
  const std::string metrics = call(dep.url(), get("/metrics")).body;
  EXPECT_NE(metrics.find("moengine:proxy_requests_total{model_name=\"\",status=\"200\"} 1\n"), std::string::npos) << metrics;
}

TEST(Proxy, ModelsComeFromADecodeInstance) {
  Deployment dep;
  const Answer a = call(dep.url(), get("/v1/models"));
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, testing::kModels);
  EXPECT_EQ(dep.d().requests("/v1/models"), 1u);
}

TEST(Proxy, HealthSaysWhichInstancesAreUp) {
  Deployment dep;
  const Answer up = call(dep.url(), get("/health"));
  EXPECT_EQ(up.status, 200);
  const Json j = Json::parse(up.body);
  EXPECT_EQ(j["status"], "ok");
  ASSERT_EQ(j["instances"].size(), 2u);
  EXPECT_EQ(j["instances"][0]["url"], dep.p().url());
  EXPECT_EQ(j["instances"][0]["role"], "prefill");
  EXPECT_EQ(j["instances"][0]["healthy"], true);
  EXPECT_EQ(j["instances"][1]["url"], dep.d().url());
  const DeadPort port;
  const std::string dead = port.url();
  Deployment half(dead);
  const Answer down = call(half.url(), get("/health"));
  EXPECT_EQ(down.status, 503);
  const Json d = Json::parse(down.body);
  EXPECT_EQ(d["status"], "unavailable");
  EXPECT_EQ(d["instances"][0]["healthy"], true);
  EXPECT_EQ(d["instances"][1]["url"], dead);
  EXPECT_EQ(d["instances"][1]["healthy"], false);
  EXPECT_EQ(d["instances"][1]["probe_ok"], false);
}

TEST(Proxy, MetricsCountRequestsAndTimeTheStream) {
  Deployment dep;
  call(dep.url(), post("/v1/completions", R"({"prompt":"Hi","stream":true})"), kAll);
  call(dep.url(), post("/v1/completions", R"({"prompt":"reject"})"));
  const Answer m = call(dep.url(), get("/metrics"));
  EXPECT_EQ(m.status, 200);
  for (const char* line : {"moengine:proxy_requests_total{model_name=\"\",status=\"200\"} 1\n",
                           "moengine:proxy_requests_total{model_name=\"\",status=\"400\"} 1\n",
                           "moengine:proxy_time_to_first_token_seconds_count{model_name=\"\"} 1\n",
                           // " A", " B", " C": two gaps between text events
                           "moengine:proxy_time_per_output_token_seconds_count{model_name=\"\"} 2\n",
                           "moengine:proxy_leg_failures_total{model_name=\"\",leg=\"prefill\"} 0\n",
                           "# TYPE moengine:proxy_time_to_first_token_seconds histogram\n"}) {
    EXPECT_NE(m.body.find(line), std::string::npos) << line << m.body;
  }
}

}  // namespace
}  // namespace moe::proxy
