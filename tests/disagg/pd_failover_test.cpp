// Instances killed (SIGKILL) under a 3P2D deployment behind `moengine proxy`, with 16
// greedy streams at once: a prefill instance dead before the requests and another killed
// while they prefill, a decode instance dead before its first token, and one killed
// mid-stream (the proxy continues those streams at other instances). Every request still
// answers exactly as one unified instance, the surviving instances' block pools empty, and
// the proxy marks the dead instances down.
#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <map>
#include <thread>

#include "disagg/pd_answers.h"
#include "disagg/pd_processes.h"

namespace moe {
namespace {

using nlohmann::json;
using testing::Answer;
using testing::ServeProcess;
using testing::words;
using testing::expect_pools_empty;
using namespace std::chrono_literals;

std::string dir() { return testing::test_dir("pd_failover"); }

std::string model() { return testing::tiny_model(dir()); }

std::unique_ptr<ServeProcess> start(const std::string& command, const std::string& name, const std::vector<std::string>& args) {
  return testing::start_ready(dir(), command, name, args);
}

std::unique_ptr<ServeProcess> serve(const std::string& name, std::vector<std::string> extra) {
  std::vector<std::string> a{"--model", model(), "--port", "0", "--served-model-name", "tiny", "--kv-cache-memory", "0.1",
                             "--threads", "1", "--chat-template", std::string(MOE_SERVER_TEST_DIR) + "/synthetic_chat_template.jinja"};
  a.insert(a.end(), extra.begin(), extra.end());
  return start("serve", name, a);
}

std::vector<json> sixteen_streams(int salt) {
  std::vector<json> bodies;
  for (int i = 0; i < 16; ++i) {
    bodies.push_back({{"model", "tiny"}, {"prompt", words(150 + 40 * i, i + salt)}, {"max_tokens", 12}, {"temperature", 0},
                      {"stream", true}, {"stream_options", {{"include_usage", true}}}});
  }
  return bodies;
}

class PdFailover : public ::testing::Test {
 protected:
  void SetUp() override {
    unified_ = serve("unified", {});
    for (int i = 0; i < 3; ++i) prefill_.push_back(serve("prefill-" + std::to_string(i), {"--role", "prefill", "--kv-transport", "ucx"}));
    for (int i = 0; i < 2; ++i) decode_.push_back(serve("decode-" + std::to_string(i), {"--role", "decode", "--kv-transport", "ucx"}));
    // Probes far apart: the proxy learns of a death from the legs that meet it.
    std::vector<std::string> args{"--port", "0", "--policy", "round_robin", "--health-interval-ms", "60000", "--prefill"};
    for (const auto& p : prefill_) args.push_back(p->url());
    args.push_back("--decode");
    for (const auto& d : decode_) args.push_back(d->url());
    proxy_ = start("proxy", "proxy", args);
  }

  // The 16 streams through the proxy, `during` run once they are under way; each answer
  // must be the unified instance's.
  void run_and_compare(const std::vector<json>& bodies, const std::function<void()>& during) {
    const auto path = [](const json& b) { return b.contains("messages") ? "/v1/chat/completions" : "/v1/completions"; };
    std::vector<Answer> want;
    for (const json& b : bodies) want.push_back(testing::ask(unified_->url(), path(b), b));
    std::vector<std::future<Answer>> got;
    for (const json& b : bodies) {
      got.push_back(std::async(std::launch::async, [&, b] { return testing::ask(proxy_->url(), path(b), b); }));
    }
    during();
    for (size_t i = 0; i < bodies.size(); ++i) testing::expect_same_answer(want[i], got[i].get(), "stream " + std::to_string(i));
  }

  json instance(const std::string& url) {
    const json health = testing::get(proxy_->url(), "/health").json();
    for (const json& i : health["instances"]) {
      if (i["url"] == url) return i;
    }
    return nullptr;
  }

  std::unique_ptr<ServeProcess> unified_, proxy_;
  std::vector<std::unique_ptr<ServeProcess>> prefill_, decode_;
};

TEST_F(PdFailover, PrefillInstancesKilledBeforeAndDuringPrefill) {
  const std::string dead_before = prefill_[0]->url(), dead_during = prefill_[1]->url();
  prefill_[0].reset();
  run_and_compare(sixteen_streams(1), [&] {
    std::this_thread::sleep_for(50ms);
    prefill_[1].reset();
  });
  EXPECT_EQ(instance(dead_before)["healthy"], false);
  EXPECT_GT(testing::metric(testing::get(proxy_->url(), "/metrics").body, "proxy_leg_failures_total", "leg=\"prefill\""), 0);
  // Traffic has moved off the dead: another round goes to the one left.
  run_and_compare(sixteen_streams(2), [] {});
  expect_pools_empty(*prefill_[2], "prefill-2");
  for (auto& d : decode_) expect_pools_empty(*d, "decode");
  EXPECT_EQ(instance(dead_before)["healthy"], false);
  EXPECT_EQ(instance(dead_during)["healthy"], false);
}

TEST_F(PdFailover, ADecodeInstanceKilledBeforeItsFirstToken) {
  const std::string dead = decode_[0]->url();
  decode_[0].reset();
  run_and_compare(sixteen_streams(3), [] {});
  EXPECT_EQ(instance(dead)["healthy"], false);
  EXPECT_GE(testing::metric(testing::get(proxy_->url(), "/metrics").body, "proxy_leg_failures_total", "leg=\"decode\""), 3);
  for (auto& p : prefill_) expect_pools_empty(*p, "prefill");
  expect_pools_empty(*decode_[1], "decode-1");
}

// Long answers, half of them chat, so that a decode instance dies with streams under way.
std::vector<json> sixteen_long_streams() {
  std::vector<json> bodies;
  for (int i = 0; i < 16; ++i) {
    json b{{"model", "tiny"}, {"max_tokens", 300}, {"ignore_eos", true}, {"temperature", 0}, {"stream", true},
           {"stream_options", {{"include_usage", true}}}};
    if (i % 2) b["messages"] = {{{"role", "user"}, {"content", words(40 + 10 * i, i)}}};
    else b["prompt"] = words(60 + 10 * i, i);
    bodies.push_back(b);
  }
  return bodies;
}

TEST_F(PdFailover, ADecodeInstanceKilledMidStreamIsResumedElsewhere) {
  const std::string dead = decode_[0]->url();
  run_and_compare(sixteen_long_streams(), [&] {
    // Once d0 has sent a good part of its streams' tokens.
    for (int i = 0; i < 2000; ++i) {
      if (testing::metric(testing::get(dead, "/metrics").body, "generation_tokens_total") >= 200) break;
      std::this_thread::sleep_for(5ms);
    }
    decode_[0].reset();
  });
  EXPECT_GE(testing::metric(testing::get(proxy_->url(), "/metrics").body, "proxy_stream_resumes_total"), 1);
  EXPECT_EQ(instance(dead)["healthy"], false);
  for (auto& p : prefill_) expect_pools_empty(*p, "prefill");
  expect_pools_empty(*decode_[1], "decode-1");
}

}  // namespace
}  // namespace moe
