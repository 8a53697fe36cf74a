// Prefix-aware routing end to end: two prefill instances publish their KV events, the proxy
// tokenizes prompts with the model's tokenizer and subscribes to both; prompts that share a
// long prefix go to the prefill instance already holding it, and are served from its cache.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "disagg/pd_answers.h"
#include "disagg/pd_processes.h"

namespace moe {
namespace {

using nlohmann::json;
using testing::ServeProcess;
using testing::words;
using namespace std::chrono_literals;

std::string dir() { return testing::test_dir("pd_prefix_routing"); }

std::string model() { return testing::tiny_model(dir()); }

std::string chat_template() { return std::string(MOE_SERVER_TEST_DIR) + "/synthetic_chat_template.jinja"; }

std::unique_ptr<ServeProcess> start(const std::string& command, const std::string& name, const std::vector<std::string>& args) {
  return testing::start_ready(dir(), command, name, args);
}

std::unique_ptr<ServeProcess> serve(const std::string& name, const std::string& role) {
  return start("serve", name,
               {"--model", model(), "--port", "0", "--served-model-name", "tiny", "--kv-cache-memory", "0.05", "--threads", "1",
                "--chat-template", chat_template(), "--role", role, "--kv-transport", "tcp", "--kv-events-endpoint",
                "tcp://127.0.0.1:*"});
}

// The prefill instance each of `n` requests was routed to, from the proxy's access log
// (written just after each answer: waited for).
std::vector<std::string> prefill_instances(const std::string& log, size_t n) {
  std::vector<std::string> out;
  for (int attempt = 0; attempt < 200 && out.size() < n; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(10ms);
    out.clear();
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);) {
      const json entry = json::parse(line);
      for (const json& e : entry["events"]) {
        if (e["event"] == "routed" && e["leg"] == "prefill") out.push_back(e["instance"]);
      }
    }
  }
  return out;
}

// Two prefill instances and a decode instance behind a proxy whose access log is `log`
// (with `more` proxy flags), started once the proxy is in sync with their KV events.
struct Deployment {
  std::unique_ptr<ServeProcess> p0, p1, d, proxy;
  std::string log;

  void start_all(const std::string& log_name, const std::vector<std::string>& more = {}) {
    p0 = serve("prefill-0", "prefill");
    p1 = serve("prefill-1", "prefill");
    d = serve("decode", "decode");
    log = dir() + "/" + log_name;
    std::filesystem::remove(log);
    std::vector<std::string> args{"--port", "0", "--prefill", p0->url(), p1->url(), "--decode", d->url(), "--tokenizer", model(),
                                  "--chat-template", chat_template(), "--health-interval-ms", "200", "--access-log", log};
    args.insert(args.end(), more.begin(), more.end());
    proxy = start("proxy", "proxy", args);
    const auto synced = [&] {
      const json h = testing::get(proxy->url(), "/health").json();
      int n = 0;
      for (const json& i : h["instances"]) n += i["kv_events"].is_object() && i["kv_events"]["synced"] == true;
      return n == 3;
    };
    for (int i = 0; i < 200 && !synced(); ++i) std::this_thread::sleep_for(25ms);
    ASSERT_TRUE(synced()) << testing::get(proxy->url(), "/health").body;
  }
};

TEST(PdPrefixRouting, PromptsSharingAPrefixGoWhereItIsCached) {
  Deployment dep;
  ASSERT_NO_FATAL_FAILURE(dep.start_all("access.log"));
  auto& [p0, p1, d, proxy, log] = dep;

  // The shared prefix goes into p1's cache straight, not through the proxy: a policy blind to
  // prefixes would send the next requests to p0, the first of two idle instances.
  const std::string shared = words(300, 1);  // about 20 blocks
  json warm{{"model", "tiny"}, {"prompt", shared + "first"}, {"max_tokens", 2}, {"temperature", 0}};
  warm["kv_transfer_params"] = {{"do_remote_decode", true}};
  const testing::Reply warmed = testing::post_json(p1->url(), "/v1/completions", warm);
  ASSERT_EQ(warmed.status, 200) << warmed.body;
  const testing::Reply released = testing::post_json(
      p1->url(), "/internal/kv/release", {{"remote_request_id", warmed.json()["kv_transfer_params"]["remote_request_id"]}});
  ASSERT_EQ(released.status, 200) << released.body;
  const auto held = [&] {
    const json health = testing::get(proxy->url(), "/health").json();
    for (const json& i : health["instances"]) {
      if (i["name"] == p1->url() && i["kv_events"]["blocks"].get<int>() > 0) return true;
    }
    return false;
  };
  for (int i = 0; i < 200 && !held(); ++i) std::this_thread::sleep_for(25ms);
  ASSERT_TRUE(held()) << testing::get(proxy->url(), "/health").body;

  for (int i = 0; i < 6; ++i) {
    const json body{{"model", "tiny"}, {"prompt", shared + "then " + std::to_string(i)}, {"max_tokens", 4}, {"temperature", 0}};
    const testing::Answer a = testing::ask(proxy->url(), "/v1/completions", body);
    ASSERT_EQ(a.status, 200) << a.error;
  }
  // Instances are named by their URLs.
  const std::vector<std::string> routed = prefill_instances(log, 6);
  ASSERT_EQ(routed.size(), 6u);
  for (const std::string& r : routed) EXPECT_EQ(r, p1->url());
  EXPECT_GE(testing::metric(testing::get(p1->url(), "/metrics").body, "prefix_cache_hits_total"), 6 * 256);
  EXPECT_EQ(testing::metric(testing::get(p0->url(), "/metrics").body, "prompt_tokens_total"), 0);
}

// A prompt routed to a prefill instance counts as cached there before the instance's
// events about it arrive: a request sharing its prefix that comes while the first one is
// still prefilling goes to the same instance. Without that, cache_aware would see no match
// and send it to the idle instance (least load).
TEST(PdPrefixRouting, ARequestSharingAPrefixStillPrefillingFollowsIt) {
  Deployment dep;
  ASSERT_NO_FATAL_FAILURE(dep.start_all("access-burst.log", {"--policy", "cache_aware"}));
  auto& [p0, p1, d, proxy, log] = dep;

  const std::string shared = words(1200, 2);  // about 3,500 tokens of the 4,096 the instances take
  // Sent together: the second is routed within a few milliseconds of the first, long
  // before the first's prefill ends and its blocks are published.
  std::vector<std::future<testing::Answer>> answers;
  for (const char* tail : {"first", "second"}) {
    const json body{{"model", "tiny"}, {"prompt", shared + tail}, {"max_tokens", 2}, {"temperature", 0}};
    answers.push_back(std::async(std::launch::async, [&, body] { return testing::ask(proxy->url(), "/v1/completions", body); }));
  }
  for (auto& a : answers) {
    const testing::Answer answer = a.get();
    ASSERT_EQ(answer.status, 200) << answer.error;
  }
  const std::vector<std::string> routed = prefill_instances(log, 2);
  ASSERT_EQ(routed.size(), 2u);
  EXPECT_EQ(routed[0], routed[1]);
}

}  // namespace
}  // namespace moe
