// A 1P1D deployment behind `moengine proxy`, over each KV transport, answers exactly as one
// unified `moengine serve`: completions and chat, whole and streamed, prompts of many KV
// blocks, prefix-cache hits on both sides, logprobs and seeded sampling, 16 streams at
// once; and a client that leaves mid-answer frees both pools. A decode instance that
// speculates answers the same, its acceptance in the access log.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
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

std::string dir() { return testing::test_dir("pd_proxy"); }

std::string model() { return testing::tiny_model(dir()); }

std::unique_ptr<ServeProcess> start(const std::string& command, const std::string& name, const std::vector<std::string>& args) {
  return testing::start_ready(dir(), command, name, args);
}

std::vector<std::string> serve_args(std::vector<std::string> extra, const std::string& file = model()) {
  std::vector<std::string> a{"--model", file, "--port", "0", "--served-model-name", "tiny", "--kv-cache-memory", "0.1",
                             "--chat-template", std::string(MOE_SERVER_TEST_DIR) + "/synthetic_chat_template.jinja"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

struct Deployment {
  std::unique_ptr<ServeProcess> prefill, decode, proxy;
};

class PdProxy : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    unified_ = start("serve", "unified", serve_args({}));
    for (const std::string kv : {"tcp", "ucx"}) {
      Deployment& d = deployments_[kv];
      d.prefill = start("serve", "prefill-" + kv, serve_args({"--role", "prefill", "--kv-transport", kv}));
      d.decode = start("serve", "decode-" + kv, serve_args({"--role", "decode", "--kv-transport", kv}));
      d.proxy = start("proxy", "proxy-" + kv, {"--port", "0", "--prefill", d.prefill->url(), "--decode", d.decode->url()});
    }
  }
  static void TearDownTestSuite() {
    deployments_.clear();
    unified_.reset();
  }

  Deployment& deployment() { return deployments_.at(GetParam()); }

  static std::unique_ptr<ServeProcess> unified_;
  static std::map<std::string, Deployment> deployments_;
};
std::unique_ptr<ServeProcess> PdProxy::unified_;
std::map<std::string, Deployment> PdProxy::deployments_;

json completion(const std::string& prompt, int max_tokens, bool stream) {
  json j{{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"stream", stream}};
  if (stream) j["stream_options"] = {{"include_usage", true}};
  return j;
}

json chat(const std::string& content, int max_tokens, bool stream) {
  json j{{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", content}}}}, {"max_tokens", max_tokens}, {"temperature", 0},
         {"stream", stream}};
  if (stream) j["stream_options"] = {{"include_usage", true}};
  return j;
}

std::string path_of(const json& body) { return body.contains("messages") ? "/v1/chat/completions" : "/v1/completions"; }


TEST_P(PdProxy, EveryKindOfRequestAnswersAsUnified) {
  std::vector<json> bodies;
  for (bool stream : {false, true}) {
    bodies.push_back(completion("The experts of the mixture", 12, stream));
    bodies.push_back(completion(words(400, 1), 10, stream));                  // 25+ blocks
    bodies.push_back(completion(words(400, 1) + "and more", 10, stream));     // prefix hits on P and D
    bodies.push_back(chat("Route this token to its experts", 11, stream));
    json lp = completion("Logprobs of every token", 8, stream);
    lp["logprobs"] = 3;
    bodies.push_back(lp);
    json lpc = chat("Chat logprobs", 7, stream);
    lpc["logprobs"] = true;
    lpc["top_logprobs"] = 2;
    bodies.push_back(lpc);
    json seeded = completion("Seeded draw", 14, stream);
    seeded["temperature"] = 0.8;
    seeded["seed"] = 11;
    bodies.push_back(seeded);
    json stop = completion("Stops early", 30, stream);
    stop["stop"] = {"e"};
    bodies.push_back(stop);
    bodies.push_back(completion("One token only", 1, stream));  // no decode leg at all
  }
  Deployment& d = deployment();
  for (const json& body : bodies) {
    const Answer want = testing::ask(unified_->url(), path_of(body), body);
    ASSERT_EQ(want.status, 200) << want.error;
    testing::expect_same_answer(want, testing::ask(d.proxy->url(), path_of(body), body), body.dump());
  }
  expect_pools_empty(*d.prefill, "prefill");
  expect_pools_empty(*d.decode, "decode");
}

// A decode instance that speculates behind the proxy: the answers stay the unified ones, and
// the access log carries each request's accepted and rejected drafts, which add up to the
// decode instance's own counters.
TEST(PdProxySpeculative, ASpeculatingDecodeInstanceAnswersAsUnifiedAndTheLogHasItsAcceptance) {
  auto unified = start("serve", "spec-unified", serve_args({}));
  auto prefill = start("serve", "spec-prefill", serve_args({"--role", "prefill", "--kv-transport", "tcp"}));
  auto decode = start("serve", "spec-decode",
                      serve_args({"--role", "decode", "--kv-transport", "tcp", "--speculative-config",
                                  R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1})"}));
  const std::string log = dir() + "/spec-access.log";
  std::filesystem::remove(log);
  auto proxy = start("proxy", "spec-proxy", {"--port", "0", "--prefill", prefill->url(), "--decode", decode->url(), "--access-log", log});
  std::vector<json> bodies;
  for (bool stream : {false, true}) {
    bodies.push_back(completion("The experts of the mixture", 40, stream));
    bodies.push_back(completion(words(200, 2), 30, stream));
    bodies.push_back(chat("Route this token to its experts", 30, stream));
  }
  for (const json& body : bodies) {
    const Answer want = testing::ask(unified->url(), path_of(body), body);
    ASSERT_EQ(want.status, 200) << want.error;
    testing::expect_same_answer(want, testing::ask(proxy->url(), path_of(body), body), body.dump());
  }
  proxy.reset();  // every line written
  int64_t accepted = 0, lines = 0;
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    ASSERT_TRUE(j.contains("spec_decode")) << line;
    accepted += j["spec_decode"]["accepted"].get<int64_t>();
    EXPECT_GT(j["spec_decode"]["accepted"].get<int64_t>() + j["spec_decode"]["rejected"].get<int64_t>(), 0) << line;
    ++lines;
  }
  EXPECT_EQ(lines, int64_t(bodies.size()));
  EXPECT_GT(accepted, 0);
  EXPECT_EQ(testing::metric(testing::get(decode->url(), "/metrics").body, "spec_decode_num_accepted_tokens_total"), accepted);
  expect_pools_empty(*prefill, "prefill");
  expect_pools_empty(*decode, "decode");
}

// Drafting with the MTP layer behind the proxy: the hand-off P answers (with the layer's
// first drafts) reaches D as it is, and D drafts exactly what a unified instance does.
TEST(PdProxySpeculative, MtpOnBothSidesDraftsAsUnifiedThroughTheProxy) {
  const std::string file = testing::tiny_model(dir(), /*with_mtp=*/true);
  const std::string mtp = R"({"method": "mtp", "num_speculative_tokens": 2})";
  auto unified = start("serve", "mtp-unified", serve_args({"--speculative-config", mtp}, file));
  auto prefill = start("serve", "mtp-prefill", serve_args({"--role", "prefill", "--kv-transport", "tcp", "--speculative-config", mtp}, file));
  auto decode = start("serve", "mtp-decode", serve_args({"--role", "decode", "--kv-transport", "tcp", "--speculative-config", mtp}, file));
  auto proxy = start("proxy", "mtp-proxy", {"--port", "0", "--prefill", prefill->url(), "--decode", decode->url()});
  for (bool stream : {false, true}) {
    for (const json& body : {completion("The experts of the mixture", 24, stream), completion(words(150, 3), 20, stream),
                             chat("Route this token to its experts", 20, stream)}) {
      const Answer want = testing::ask(unified->url(), path_of(body), body);
      ASSERT_EQ(want.status, 200) << want.error;
      testing::expect_same_answer(want, testing::ask(proxy->url(), path_of(body), body), body.dump());
    }
  }
  const auto drafted = [](ServeProcess& s) { return testing::metric(testing::get(s.url(), "/metrics").body, "spec_decode_num_draft_tokens_total"); };
  EXPECT_GT(drafted(*decode), 0);
  EXPECT_EQ(drafted(*decode), drafted(*unified));
  expect_pools_empty(*prefill, "prefill");
  expect_pools_empty(*decode, "decode");
}

TEST_P(PdProxy, SixteenConcurrentStreamsAnswerAsUnified) {
  std::vector<json> bodies;
  for (int i = 0; i < 16; ++i) bodies.push_back(i % 2 ? completion(words(30 + 20 * i, i), 12, true) : chat(words(10 + 15 * i, i), 12, true));
  std::vector<Answer> want;
  for (const json& b : bodies) want.push_back(testing::ask(unified_->url(), path_of(b), b));
  Deployment& d = deployment();
  std::vector<std::future<Answer>> got;
  for (const json& b : bodies) got.push_back(std::async(std::launch::async, [&, b] { return testing::ask(d.proxy->url(), path_of(b), b); }));
  for (size_t i = 0; i < bodies.size(); ++i) testing::expect_same_answer(want[i], got[i].get(), "stream " + std::to_string(i));
  expect_pools_empty(*d.prefill, "prefill");
  expect_pools_empty(*d.decode, "decode");
}

TEST_P(PdProxy, AClientThatLeavesMidStreamFreesBothPools) {
  Deployment& d = deployment();
  json body = completion(words(200, 3), 3000, true);
  body["ignore_eos"] = true;
  boost::asio::io_context io;
  http::HttpClient client(http::parse_url(d.proxy->url()), http::HttpClientOptions{10s});
  int events = 0;
  http::HttpRequest req;
  req.target = "/v1/completions";
  req.body = body.dump();
  boost::asio::co_spawn(io, client.stream(std::move(req), [&](const http::SseEvent&, http::Clock::time_point) { return ++events < 3; }),
                        [](std::exception_ptr, http::HttpResponse) {});
  io.run();
  EXPECT_EQ(events, 3);
  expect_pools_empty(*d.prefill, "prefill");
  expect_pools_empty(*d.decode, "decode");
}

INSTANTIATE_TEST_SUITE_P(Transports, PdProxy, ::testing::Values("tcp", "ucx"));

}  // namespace
}  // namespace moe
