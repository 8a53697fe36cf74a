// The proxy's failover, in process, with fake instances (fake_instances.h): a leg whose
// instance fails before the client saw any of it runs again at another instance, an
// instance that keeps failing is taken out of routing, and the admin API adds, drains and
// removes instances while the proxy runs.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdio>
#include <fstream>
#include <map>
#include <thread>

#include "fake_instances.h"
#include "http/http_client.h"

namespace moe::proxy {
namespace {

using testing::FakeInstance;
using Kind = FakeInstance::Kind;

struct Answer {
  int status = 0;
  std::string body;
  std::vector<std::string> events;
};

Answer call(const std::string& url, http::HttpRequest request, bool stream = false) {
  asio::io_context io;
  http::HttpClient client(http::parse_url(url), http::HttpClientOptions{std::chrono::seconds(5)});
  Answer a;
  auto run = [&]() -> asio::awaitable<void> {
    http::HttpResponse r;
    if (stream) {
      r = co_await client.stream(std::move(request), [&](const http::SseEvent& e, http::Clock::time_point) {
        a.events.push_back(e.data);
        return true;
      });
    } else {
      r = co_await client.fetch(std::move(request));
    }
    a.status = r.status;
    a.body = r.body;
  };
  asio::co_spawn(io, run(), asio::detached);
  io.run();
  return a;
}

http::HttpRequest request(const std::string& method, const std::string& target, const std::string& body = "",
                          const std::string& key = "") {
  http::HttpRequest r;
  r.method = method;
  r.target = target;
  r.body = body;
  if (!key.empty()) r.headers.emplace_back("Authorization", "Bearer " + key);
  return r;
}

const std::string kCompletion = R"({"prompt":"Hi","max_tokens":3})";

// A proxy over the fake instances given, round robin so that the order of tries is known.
class Pool {
 public:
  Pool(std::vector<Kind> prefill, std::vector<Kind> decode, size_t max_queued = 1024,
       std::chrono::milliseconds queue_timeout = std::chrono::milliseconds(200), const std::string& access_log = "") {
    ProxyConfig c;
    for (size_t i = 0; i < prefill.size(); ++i) add(c, "p" + std::to_string(i), prefill[i], InstanceRole::prefill);
    for (size_t i = 0; i < decode.size(); ++i) add(c, "d" + std::to_string(i), decode[i], InstanceRole::decode);
    c.admin_key = "admin";
    c.scheduler.policy = routing::Policy::round_robin;
    c.timeout = std::chrono::seconds(5);
    c.health.interval = std::chrono::seconds(60);
    c.dispatch.queue_timeout = queue_timeout;
    c.dispatch.max_queued = max_queued;
    c.access_log = access_log;
    proxy_ = std::make_unique<ProxyServer>(c);
    http::ServerConfig sc;
    sc.port = 0;
    sc.io_threads = 2;
    server_ = std::make_unique<http::HttpServer>(sc, proxy_->router(), &ProxyServer::http_error);
    server_->start();
  }
  ~Pool() { server_->stop(); }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }
  FakeInstance& at(const std::string& name) { return *fakes_.at(name); }
  std::string metrics() { return call(url(), request("GET", "/metrics")).body; }

 private:
  void add(ProxyConfig& c, const std::string& name, Kind kind, InstanceRole role) {
    fakes_[name] = std::make_unique<FakeInstance>(kind);
    c.instances.push_back({name, fakes_[name]->url(), role, 1.0});
  }

  std::map<std::string, std::unique_ptr<FakeInstance>> fakes_;
  std::unique_ptr<ProxyServer> proxy_;
  std::unique_ptr<http::HttpServer> server_;
};

bool has(const std::string& text, const std::string& line) { return text.find(line) != std::string::npos; }

TEST(ProxyFailover, AFailingPrefillInstanceIsRetriedThenTakenOutOfRouting) {
  Pool pool({Kind::kFailing, Kind::kPrefill}, {Kind::kDecode});
  for (int i = 0; i < 8; ++i) {
    const bool stream = i % 2 == 1;
    const std::string body = stream ? R"({"prompt":"Hi","stream":true})" : kCompletion;
    const Answer a = call(pool.url(), request("POST", "/v1/completions", body), stream);
    ASSERT_EQ(a.status, 200) << a.body;
    if (stream) {
      ASSERT_FALSE(a.events.empty());
      EXPECT_EQ(a.events.back(), "[DONE]");
      EXPECT_EQ(a.body.find("error"), std::string::npos);
    } else {
      EXPECT_EQ(Json::parse(a.body)["choices"][0]["text"], " A B C");
    }
  }
  // Three failures in a row open p0's breaker: later requests no longer try it.
  EXPECT_EQ(pool.at("p0").requests("/v1/completions"), 3u);
  EXPECT_EQ(pool.at("p1").requests("/v1/completions"), 8u);
  const std::string m = pool.metrics();
  EXPECT_TRUE(has(m, "moengine:proxy_instance_up{model_name=\"\",instance=\"p0\",role=\"prefill\"} 0\n")) << m;
  EXPECT_TRUE(has(m, "moengine:proxy_leg_failures_total{model_name=\"\",leg=\"prefill\"} 3\n")) << m;
  EXPECT_TRUE(has(m, "moengine:proxy_requests_total{model_name=\"\",status=\"200\"} 8\n")) << m;
}

TEST(ProxyFailover, AFailingDecodeInstanceIsRetriedWithTheSameHandOff) {
  Pool pool({Kind::kPrefill}, {Kind::kFailing, Kind::kDecode});
  for (const bool stream : {false, true, false, true}) {
    const std::string body = stream ? R"({"prompt":"Hi","stream":true})" : kCompletion;
    const Answer a = call(pool.url(), request("POST", "/v1/completions", body), stream);
    ASSERT_EQ(a.status, 200) << a.body;
  }
  const auto tried = pool.at("d0").wait_for("/v1/completions");
  ASSERT_FALSE(tried.empty());
  const auto served = pool.at("d1").wait_for("/v1/completions", 4);
  ASSERT_EQ(served.size(), 4u);
  EXPECT_EQ(Json::parse(tried[0].body)["kv_transfer_params"], Json::parse(served[0].body)["kv_transfer_params"]);
  // D took every hand-off, so P was never asked to release one.
  EXPECT_EQ(pool.at("p0").requests("/internal/kv/release"), 0u);
}

// One JSON line per request: its routing, the retry, the hand-off and the status.
TEST(ProxyFailover, TheAccessLogTellsEachRequestsLife) {
  const std::string path = ::testing::TempDir() + "proxy_access.log";
  std::remove(path.c_str());
  {
    Pool pool({Kind::kFailing, Kind::kPrefill}, {Kind::kDecode}, 1024, std::chrono::milliseconds(200), path);
    ASSERT_EQ(call(pool.url(), request("POST", "/v1/completions", R"({"prompt":"Hi","stream":true})"), true).status, 200);
    ASSERT_EQ(call(pool.url(), request("POST", "/v1/completions", "not json")).status, 400);
  }
  std::ifstream in(path);
  std::vector<Json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(Json::parse(line));
  ASSERT_EQ(lines.size(), 2u);
  const Json& first = lines[0];
  EXPECT_EQ(first["status"], 200);
  EXPECT_EQ(first["stream"], true);
  std::vector<std::string> events;
  for (const Json& e : first["events"]) events.push_back(e["event"].get<std::string>() + (e.contains("instance") ? ":" + e["instance"].get<std::string>() : ""));
  EXPECT_EQ(events, (std::vector<std::string>{"routed:p0", "retry:p0", "routed:p1", "first_token", "prefill_done", "routed:d0",
                                              "decode_started"}));
  EXPECT_EQ(lines[1]["status"], 400);
  EXPECT_TRUE(lines[1]["events"].empty());
}

TEST(ProxyFailover, WhenEveryInstanceFailsTheLastErrorIsTheAnswer) {
  Pool pool({Kind::kPrefill}, {Kind::kFailing, Kind::kFailing});
  const Answer a = call(pool.url(), request("POST", "/v1/completions", kCompletion));
  EXPECT_EQ(a.status, 500);
  EXPECT_EQ(a.body, testing::kBroken);
  EXPECT_EQ(pool.at("d0").requests("/v1/completions") + pool.at("d1").requests("/v1/completions"), 2u);
  EXPECT_EQ(pool.at("p0").wait_for("/internal/kv/release").size(), 1u);
}

TEST(ProxyFailover, TheAdminApiAddsDrainsAndRemovesInstances) {
  Pool pool({Kind::kPrefill}, {Kind::kDecode});
  EXPECT_EQ(call(pool.url(), request("GET", "/admin/instances")).status, 403);
  EXPECT_EQ(call(pool.url(), request("GET", "/admin/instances", "", "wrong")).status, 403);
  const Answer list = call(pool.url(), request("GET", "/admin/instances", "", "admin"));
  ASSERT_EQ(list.status, 200);
  EXPECT_EQ(Json::parse(list.body)["instances"].size(), 2u);

  FakeInstance extra(Kind::kDecode);
  const Answer added = call(pool.url(), request("POST", "/admin/instances/add",
                                                Json{{"url", extra.url()}, {"name", "d9"}, {"role", "decode"}}.dump(), "admin"));
  EXPECT_EQ(added.status, 201) << added.body;
  const Answer dup = call(pool.url(), request("POST", "/admin/instances/add",
                                              Json{{"url", extra.url()}, {"name", "d9"}}.dump(), "admin"));
  EXPECT_EQ(dup.status, 400);
  EXPECT_EQ(Json::parse(dup.body)["error"]["message"], "an instance named d9 is already registered");
  EXPECT_EQ(call(pool.url(), request("POST", "/admin/instances/add", R"({"url":"ftp://x"})", "admin")).status, 400);

  // Drained, d0 finishes nothing new: every decode leg goes to d9.
  EXPECT_EQ(call(pool.url(), request("POST", "/admin/instances/drain", R"({"name":"d0"})", "admin")).status, 200);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(call(pool.url(), request("POST", "/v1/completions", kCompletion)).status, 200);
  EXPECT_EQ(pool.at("d0").requests("/v1/completions"), 0u);
  EXPECT_EQ(extra.requests("/v1/completions"), 3u);

  EXPECT_EQ(call(pool.url(), request("POST", "/admin/instances/remove", R"({"name":"d9"})", "admin")).status, 200);
  const Answer gone = call(pool.url(), request("POST", "/admin/instances/remove", R"({"name":"d9"})", "admin"));
  EXPECT_EQ(gone.status, 404);
  EXPECT_EQ(Json::parse(gone.body)["error"]["code"], "unknown_instance");
  EXPECT_EQ(call(pool.url(), request("POST", "/admin/instances/resume", R"({"name":"d0"})", "admin")).status, 200);
  EXPECT_EQ(call(pool.url(), request("POST", "/v1/completions", kCompletion)).status, 200);
  EXPECT_EQ(pool.at("d0").requests("/v1/completions"), 1u);
  EXPECT_EQ(call(pool.url(), request("POST", "/admin/instances/drain", R"({})", "admin")).status, 400);
}

TEST(ProxyFailover, WaitingRequestsAreBoundedAndTimeOut) {
  Pool pool({Kind::kPrefill}, {Kind::kDecode}, 1, std::chrono::milliseconds(1500));
  EXPECT_EQ(call(pool.url(), request("POST", "/admin/instances/drain", R"({"name":"p0"})", "admin")).status, 200);
  // No prefill instance takes anything: the first request waits in the queue, the second
  // finds it full.
  Answer waited;
  std::thread first([&] { waited = call(pool.url(), request("POST", "/v1/completions", kCompletion)); });
  std::string m;
  for (int i = 0; i < 100 && !has(m, "moengine:proxy_queued_requests{model_name=\"\"} 1\n"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    m = pool.metrics();
  }
  const Answer full = call(pool.url(), request("POST", "/v1/completions", kCompletion));
  EXPECT_EQ(full.status, 429);
  EXPECT_EQ(Json::parse(full.body)["error"]["code"], "queue_full");
  first.join();
  EXPECT_EQ(waited.status, 503);
  EXPECT_EQ(Json::parse(waited.body)["error"]["code"], "no_instance_available");
  EXPECT_EQ(pool.at("p0").requests("/v1/completions"), 0u);
}

}  // namespace
}  // namespace moe::proxy
