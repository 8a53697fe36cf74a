// Prefill and decode instances as real `moengine serve` processes, driven through the
// hand-off protocol the proxy speaks (docs/disaggregation.md): the joined answer equals a
// unified instance's, and each failure (an expired lease, a prefill instance that died,
// another model on the other side, a request at the wrong role, a client that leaves
// during the pull or during decode)
// ends with a clear answer and both block pools empty.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>

#include "disagg/pd_answers.h"
#include "model/gguf.h"
#include "model/model_config.h"
#include "support/http_calls.h"
#include "support/run_cli.h"
#include "support/serve_process.h"
#include "support/throttled_kv_relay.h"

namespace moe {
namespace {

using nlohmann::json;
using testing::metric;
using testing::Reply;
using testing::ServeProcess;
using testing::expect_pools_empty;
using namespace std::chrono_literals;

std::string dir() { return testing::test_dir("pd_serve"); }

std::string model(uint64_t seed) {
  const std::string path = dir() + "/tiny-" + std::to_string(seed) + ".gguf";
  if (!std::filesystem::exists(path)) {
    const testing::CliResult r =
        testing::run_moengine("gen-model --arch deepseek2 --preset tiny --type q8_0 --seed " + std::to_string(seed) + " --out " + path);
    if (r.status != 0) throw std::runtime_error(r.out);
  }
  return path;
}

// The tiny model with an MTP layer.
std::string mtp_model() {
  const std::string path = dir() + "/tiny-mtp.gguf";
  if (!std::filesystem::exists(path)) {
    const testing::CliResult r = testing::run_moengine("gen-model --arch deepseek2 --preset tiny --type q8_0 --nextn-layers 1 --out " + path);
    if (r.status != 0) throw std::runtime_error(r.out);
  }
  return path;
}

// A serve process with a model file and a small KV cache (on a free port unless the extra
// flags give one); extra flags after.
std::unique_ptr<ServeProcess> serve_file(const std::string& name, const std::string& file, std::vector<std::string> extra) {
  std::vector<std::string> args{"--model", file, "--served-model-name", "tiny", "--kv-cache-memory", "0.05",
                                "--chat-template", std::string(MOE_SERVER_TEST_DIR) + "/synthetic_chat_template.jinja"};
  if (std::find(extra.begin(), extra.end(), "--port") == extra.end()) extra.insert(extra.end(), {"--port", "0"});
  args.insert(args.end(), extra.begin(), extra.end());
  auto p = std::make_unique<ServeProcess>(args, dir() + "/" + name + ".log");
  if (p->url().empty()) throw std::runtime_error(name + " never became ready:\n" + p->log());
  return p;
}

// The same with the tiny model of this seed.
std::unique_ptr<ServeProcess> serve(const std::string& name, std::vector<std::string> extra, uint64_t seed = 42) {
  return serve_file(name, model(seed), std::move(extra));
}

json completion(const std::string& prompt, int max_tokens) {
  return {{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

// A prompt of about n_words words: many KV blocks for large n.
std::string long_prompt(int n_words, int salt) {
  std::string s;
  for (int i = 0; i < n_words; ++i) s += "w" + std::to_string((i * 7919 + salt) % 97) + " ";
  return s;
}

struct Legs {
  Reply prefill, decode;  // decode.status 0: no decode leg (nothing was handed off)
};

// What the proxy does: the request to P with do_remote_decode, then P's kv_transfer_params
// to D.
Legs hand_off(ServeProcess& p, ServeProcess& d, const std::string& path, json body) {
  Legs legs;
  json to_p = body;
  to_p["kv_transfer_params"] = {{"do_remote_decode", true}};
  legs.prefill = testing::post_json(p.url(), path, to_p);
  if (legs.prefill.status != 200) return legs;
  const json params = legs.prefill.json()["kv_transfer_params"];
  if (params.is_null()) return legs;
  body["kv_transfer_params"] = params;
  legs.decode = testing::post_json(d.url(), path, body);
  return legs;
}

std::string text_of(const json& r) {
  const json& c = r["choices"][0];
  return c.contains("message") ? c["message"]["content"].get<std::string>() : c["text"].get<std::string>();
}


class PdServe : public ::testing::TestWithParam<std::string> {};

// Param: TRANSPORT or TRANSPORT/KV_DTYPE.
TEST_P(PdServe, HandOffGivesTheUnifiedAnswer) {
  const std::string param = GetParam();
  const std::string kv = param.substr(0, param.find('/'));
  const std::string dtype = param.find('/') == std::string::npos ? "auto" : param.substr(param.find('/') + 1);
  const std::string name = kv + "-" + dtype;
  auto u = serve("unified-" + name, {"--kv-cache-dtype", dtype});
  auto p = serve("prefill-" + name, {"--role", "prefill", "--kv-transport", kv, "--kv-cache-dtype", dtype});
  auto d = serve("decode-" + name, {"--role", "decode", "--kv-transport", kv, "--kv-cache-dtype", dtype});
  const std::vector<json> bodies{
      completion("The experts of the mixture", 12), completion(long_prompt(300, 1), 10),
      completion(long_prompt(300, 1) + " and a tail", 10),  // a prefix-cache hit on P and on D
      json{{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "Route this token"}}}}, {"max_tokens", 9}, {"temperature", 0}},
      json{{"model", "tiny"}, {"prompt", "Seeded draw"}, {"max_tokens", 14}, {"temperature", 0.8}, {"seed", 7}, {"logprobs", 2}}};
  int handed = 0;
  for (const json& body : bodies) {
    const std::string path = body.contains("messages") ? "/v1/chat/completions" : "/v1/completions";
    const Reply want = testing::post_json(u->url(), path, body);
    ASSERT_EQ(want.status, 200) << want.body;
    const Legs got = hand_off(*p, *d, path, body);
    ASSERT_EQ(got.prefill.status, 200) << got.prefill.body;
    ASSERT_EQ(got.decode.status, 200) << got.decode.body << "\n" << d->log();
    ++handed;
    const json w = want.json(), pj = got.prefill.json(), dj = got.decode.json();
    EXPECT_EQ(text_of(pj) + text_of(dj), text_of(w)) << body.dump();
    EXPECT_EQ(dj["usage"]["prompt_tokens"], w["usage"]["prompt_tokens"]);
    EXPECT_EQ(dj["usage"]["completion_tokens"], w["usage"]["completion_tokens"]);
    EXPECT_EQ(dj["choices"][0]["finish_reason"], w["choices"][0]["finish_reason"]);
    EXPECT_EQ(pj["kv_transfer_params"]["remote_engine_id"], testing::get(p->url(), "/health").json()["engine_id"]);
  }
  const std::string dm = testing::get(d->url(), "/metrics").body;
  EXPECT_EQ(metric(dm, "kv_remote_loads_total", "result=\"loaded\""), handed);
  EXPECT_GT(metric(dm, "kv_transfer_bytes_total"), 0);
  // The third prompt shares its first blocks with the second: D did not pull them again.
  EXPECT_GT(metric(dm, "prefix_cache_hits_total"), 0);
  EXPECT_GT(metric(testing::get(p->url(), "/metrics").body, "prefix_cache_hits_total"), 0);
  expect_pools_empty(*p, "prefill");
  expect_pools_empty(*d, "decode");
}

INSTANTIATE_TEST_SUITE_P(Transports, PdServe, ::testing::Values("tcp", "ucx", "tcp/f32", "ucx/q8_0", "tcp/fp8_e4m3"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;
                           std::replace(n.begin(), n.end(), '/', '_');
                           return n;
                         });

constexpr const char* kNgram = R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1})";

// Greedy prompts a tiny random model soon repeats itself on, so n-gram lookup has drafts.
std::vector<json> speculative_bodies() {
  return {completion("The experts of the mixture", 40), completion(long_prompt(120, 3), 32),
          json{{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "Route this token"}}}}, {"max_tokens", 30}, {"temperature", 0}},
          json{{"model", "tiny"}, {"prompt", "Stop somewhere"}, {"max_tokens", 40}, {"temperature", 0}, {"stop", {"w1"}}, {"logprobs", 1}}};
}

std::string path_of(const json& body) { return body.contains("messages") ? "/v1/chat/completions" : "/v1/completions"; }

TEST(PdServeSpeculative, AnInstanceThatSpeculatesAnswersAsOneThatDoesNot) {
  auto plain = serve("spec-plain", {});
  auto spec = serve("spec-unified", {"--speculative-config", kNgram});
  int64_t accepted = 0, rejected = 0;
  for (const json& body : speculative_bodies()) {
    const Reply want = testing::post_json(plain->url(), path_of(body), body);
    const Reply got = testing::post_json(spec->url(), path_of(body), body);
    ASSERT_EQ(want.status, 200) << want.body;
    ASSERT_EQ(got.status, 200) << got.body;
    const json w = want.json(), g = got.json();
    EXPECT_EQ(text_of(g), text_of(w)) << body.dump();
    EXPECT_EQ(g["choices"][0]["finish_reason"], w["choices"][0]["finish_reason"]);
    EXPECT_EQ(g["usage"]["completion_tokens"], w["usage"]["completion_tokens"]);
    EXPECT_EQ(g["choices"][0]["logprobs"].is_null() ? json() : g["choices"][0]["logprobs"]["tokens"],
              w["choices"][0]["logprobs"].is_null() ? json() : w["choices"][0]["logprobs"]["tokens"]);
    EXPECT_FALSE(w["usage"].contains("completion_tokens_details"));
    if (g["usage"].contains("completion_tokens_details")) {
      accepted += g["usage"]["completion_tokens_details"]["accepted_prediction_tokens"].get<int64_t>();
      rejected += g["usage"]["completion_tokens_details"]["rejected_prediction_tokens"].get<int64_t>();
    }
  }
  // A stream carries the same text, a step's accepted run in one event, and the usage.
  json body = completion(long_prompt(120, 3), 32);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  std::vector<std::string> events;
  ASSERT_EQ(testing::http_call(spec->url(), "POST", "/v1/completions", body.dump(), &events).status, 200);
  std::string streamed;
  json usage;
  size_t text_events = 0;
  for (const std::string& e : events) {
    if (e == "[DONE]") continue;
    const json j = json::parse(e);
    if (!j["choices"].empty() && !j["choices"][0]["text"].get<std::string>().empty()) streamed += j["choices"][0]["text"], ++text_events;
    if (j["usage"].is_object()) usage = j["usage"];
  }
  EXPECT_EQ(streamed, text_of(testing::post_json(plain->url(), "/v1/completions", completion(long_prompt(120, 3), 32)).json()));
  EXPECT_EQ(usage["completion_tokens"], 32);
  ASSERT_TRUE(usage.contains("completion_tokens_details")) << usage.dump();
  const int64_t stream_accepted = usage["completion_tokens_details"]["accepted_prediction_tokens"].get<int64_t>();
  EXPECT_LE(text_events, size_t(32 - stream_accepted));
  accepted += stream_accepted;
  rejected += usage["completion_tokens_details"]["rejected_prediction_tokens"].get<int64_t>();

  const std::string m = testing::get(spec->url(), "/metrics").body;
  EXPECT_GT(accepted, 0);
  EXPECT_EQ(metric(m, "spec_decode_num_accepted_tokens_total"), accepted);
  EXPECT_EQ(metric(m, "spec_decode_num_draft_tokens_total"), accepted + rejected);
  EXPECT_GT(metric(m, "spec_decode_num_drafts_total"), 0);
  EXPECT_EQ(metric(m, "spec_decode_num_accepted_tokens_per_pos_total", "position=\"0\"") +
                metric(m, "spec_decode_num_accepted_tokens_per_pos_total", "position=\"1\"") +
                metric(m, "spec_decode_num_accepted_tokens_per_pos_total", "position=\"2\""),
            accepted);
  EXPECT_EQ(testing::get(plain->url(), "/metrics").body.find("spec_decode"), std::string::npos);
  expect_pools_empty(*spec, "unified");
}

// Only the decode instance speculates; its first draft comes from the prompt and the token
// the prefill instance made, which it has: nothing more crosses in the hand-off.
TEST(PdServeSpeculative, ADecodeInstanceThatSpeculatesGivesTheUnifiedAnswer) {
  auto u = serve("spec-pd-unified", {});
  auto p = serve("spec-pd-prefill", {"--role", "prefill", "--kv-transport", "tcp"});
  auto d = serve("spec-pd-decode", {"--role", "decode", "--kv-transport", "tcp", "--speculative-config", kNgram});
  for (const json& body : speculative_bodies()) {
    const Reply want = testing::post_json(u->url(), path_of(body), body);
    ASSERT_EQ(want.status, 200) << want.body;
    const Legs got = hand_off(*p, *d, path_of(body), body);
    ASSERT_EQ(got.prefill.status, 200) << got.prefill.body;
    ASSERT_EQ(got.decode.status, 200) << got.decode.body << "\n" << d->log();
    EXPECT_EQ(text_of(got.prefill.json()) + text_of(got.decode.json()), text_of(want.json())) << body.dump();
    EXPECT_EQ(got.decode.json()["usage"]["completion_tokens"], want.json()["usage"]["completion_tokens"]);
  }
  EXPECT_GT(metric(testing::get(d->url(), "/metrics").body, "spec_decode_num_accepted_tokens_total"), 0);
  expect_pools_empty(*p, "prefill");
  expect_pools_empty(*d, "decode");
}

constexpr const char* kMtp = R"({"method": "mtp", "num_speculative_tokens": 2})";

int64_t drafted(const json& usage) {
  if (!usage.contains("completion_tokens_details")) return 0;
  const json& d = usage["completion_tokens_details"];
  return d["accepted_prediction_tokens"].get<int64_t>() + d["rejected_prediction_tokens"].get<int64_t>();
}

// With the MTP layer the prefill instance keeps the layer's KV and drafts after the first
// token, and both cross in the hand-off: the decode instance drafts from its first step on,
// as the unified instance does, and answers as it does. A decode instance without the layer
// takes the same hand-off; one with it refuses a prefill instance that kept no MTP rows.
TEST(PdServeSpeculative, MtpDecodeInstancesDraftFromTheHandOff) {
  const std::string file = mtp_model();
  auto u = serve_file("mtp-unified", file, {"--speculative-config", kMtp});
  auto p = serve_file("mtp-prefill", file, {"--role", "prefill", "--kv-transport", "tcp", "--speculative-config", kMtp});
  auto d = serve_file("mtp-decode", file, {"--role", "decode", "--kv-transport", "tcp", "--speculative-config", kMtp});
  auto d_plain = serve_file("mtp-decode-plain", file, {"--role", "decode", "--kv-transport", "tcp"});
  auto p_plain = serve_file("mtp-prefill-plain", file, {"--role", "prefill", "--kv-transport", "tcp"});
  for (const json& body : speculative_bodies()) {
    const Reply want = testing::post_json(u->url(), path_of(body), body);
    ASSERT_EQ(want.status, 200) << want.body;
    for (ServeProcess* dd : {d.get(), d_plain.get()}) {
      json to_p = body;
      to_p["kv_transfer_params"] = {{"do_remote_decode", true}};
      const Reply pr = testing::post_json(p->url(), path_of(body), to_p);
      ASSERT_EQ(pr.status, 200) << pr.body;
      const json params = pr.json()["kv_transfer_params"];
      ASSERT_TRUE(params.contains("draft_token_ids")) << params.dump();
      EXPECT_EQ(params["draft_token_ids"].size(), 2u);
      json to_d = body;
      to_d["kv_transfer_params"] = params;
      const Reply dr = testing::post_json(dd->url(), path_of(body), to_d);
      ASSERT_EQ(dr.status, 200) << dr.body << "\n" << dd->log();
      EXPECT_EQ(text_of(pr.json()) + text_of(dr.json()), text_of(want.json())) << body.dump();
      EXPECT_EQ(dr.json()["usage"]["completion_tokens"], want.json()["usage"]["completion_tokens"]);
      // The unified instance verified drafts after its first token too; the decode
      // instance, P's: the same number of steps and drafts.
      if (dd == d.get() && want.json()["choices"][0]["finish_reason"] == "length") {
        EXPECT_EQ(drafted(dr.json()["usage"]), drafted(want.json()["usage"])) << body.dump();
      }
    }
  }
  const Legs refused = hand_off(*p_plain, *d, "/v1/completions", completion(long_prompt(30, 4), 6));
  ASSERT_EQ(refused.prefill.status, 200) << refused.prefill.body;
  EXPECT_FALSE(refused.prefill.json()["kv_transfer_params"].contains("draft_token_ids"));
  EXPECT_EQ(refused.decode.status, 502) << refused.decode.body;
  EXPECT_NE(refused.decode.body.find("MTP layer rows for 0 layers there, 1 here"), std::string::npos) << refused.decode.body;
  for (ServeProcess* s : {p.get(), p_plain.get()}) expect_pools_empty(*s, "prefill");
  for (ServeProcess* s : {d.get(), d_plain.get()}) expect_pools_empty(*s, "decode");
}

TEST(PdServeRoles, EachRoleRefusesWhatItDoesNotTake) {
  auto p = serve("roles-prefill", {"--role", "prefill", "--kv-transport", "tcp"});
  auto d = serve("roles-decode", {"--role", "decode", "--kv-transport", "tcp"});
  auto u = serve("roles-unified", {});
  const json plain = completion("hello", 4);
  for (ServeProcess* s : {p.get(), d.get()}) {
    const Reply r = testing::post_json(s->url(), "/v1/completions", plain);
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(r.json()["error"]["code"], "wrong_role") << r.body;
  }
  json to_p = plain;
  to_p["kv_transfer_params"] = {{"do_remote_decode", true}};
  const Reply r = testing::post_json(u->url(), "/v1/completions", to_p);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json()["error"]["code"], "wrong_role");
  // A decode leg that is not one: the params are checked field by field.
  json bad = plain;
  bad["kv_transfer_params"] = {{"do_remote_prefill", true}, {"remote_engine_id", "x"}};
  const Reply b = testing::post_json(d->url(), "/v1/completions", bad);
  EXPECT_EQ(b.status, 400) << b.body;
  EXPECT_NE(b.body.find("kv_transfer_params.remote_host"), std::string::npos) << b.body;
  // max_tokens 1: the first token is the whole answer, nothing to hand off.
  const Reply one = testing::post_json(p->url(), "/v1/completions", [&] {
    json j = completion("hello", 1);
    j["kv_transfer_params"] = {{"do_remote_decode", true}};
    return j;
  }());
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_TRUE(one.json()["kv_transfer_params"].is_null());
  expect_pools_empty(*p, "prefill");
}

TEST(PdServeFailures, AnExpiredLeaseFailsOrIsRecomputed) {
  auto u = serve("lease-unified", {});
  auto p = serve("lease-prefill", {"--role", "prefill", "--kv-transport", "tcp", "--kv-lease-ms", "200"});
  auto d_fail = serve("lease-decode-fail", {"--role", "decode", "--kv-transport", "tcp", "--kv-load-failure-policy", "fail"});
  auto d_rec = serve("lease-decode-recompute", {"--role", "decode", "--kv-transport", "tcp"});
  const json body = completion(long_prompt(80, 3), 8);
  json to_p = body;
  to_p["kv_transfer_params"] = {{"do_remote_decode", true}};
  for (ServeProcess* d : {d_fail.get(), d_rec.get()}) {
    const Reply pr = testing::post_json(p->url(), "/v1/completions", to_p);
    ASSERT_EQ(pr.status, 200) << pr.body;
    std::this_thread::sleep_for(400ms);
    json to_d = body;
    to_d["kv_transfer_params"] = pr.json()["kv_transfer_params"];
    const Reply dr = testing::post_json(d->url(), "/v1/completions", to_d);
    if (d == d_fail.get()) {
      EXPECT_EQ(dr.status, 502) << dr.body;
      EXPECT_NE(dr.body.find("expired"), std::string::npos) << dr.body;
      EXPECT_EQ(dr.json()["error"]["code"], "kv_transfer_failed");
    } else {
      ASSERT_EQ(dr.status, 200) << dr.body;
      EXPECT_EQ(text_of(pr.json()) + text_of(dr.json()), text_of(testing::post_json(u->url(), "/v1/completions", body).json()));
      EXPECT_EQ(metric(testing::get(d->url(), "/metrics").body, "kv_remote_loads_total", "result=\"recomputed\""), 1);
    }
    EXPECT_EQ(metric(testing::get(d->url(), "/metrics").body, "kv_transfer_failures_total", "reason=\"lease_expired\""), 1);
    expect_pools_empty(*d, "decode");
  }
  EXPECT_EQ(metric(testing::get(p->url(), "/metrics").body, "kv_leases_expired_total"), 2);
  expect_pools_empty(*p, "prefill");
}

TEST(PdServeFailures, APrefillInstanceThatDiedIsRecomputedOrReported) {
  auto u = serve("dead-unified", {});
  auto d_fail = serve("dead-decode-fail", {"--role", "decode", "--kv-transport", "tcp", "--kv-load-failure-policy", "fail"});
  auto d_rec = serve("dead-decode-recompute", {"--role", "decode", "--kv-transport", "tcp"});
  const json body = completion(long_prompt(60, 5), 8);
  for (ServeProcess* d : {d_fail.get(), d_rec.get()}) {
    auto p = serve("dead-prefill", {"--role", "prefill", "--kv-transport", "tcp"});
    json to_p = body;
    to_p["kv_transfer_params"] = {{"do_remote_decode", true}};
    const Reply pr = testing::post_json(p->url(), "/v1/completions", to_p);
    ASSERT_EQ(pr.status, 200) << pr.body;
    p.reset();  // SIGKILL: the blocks and the KV endpoint are gone
    json to_d = body;
    to_d["kv_transfer_params"] = pr.json()["kv_transfer_params"];
    const Reply dr = testing::post_json(d->url(), "/v1/completions", to_d);
    if (d == d_fail.get()) {
      EXPECT_EQ(dr.status, 502) << dr.body;
      EXPECT_NE(dr.body.find("unreachable"), std::string::npos) << dr.body;
    } else {
      ASSERT_EQ(dr.status, 200) << dr.body;
      EXPECT_EQ(text_of(pr.json()) + text_of(dr.json()), text_of(testing::post_json(u->url(), "/v1/completions", body).json()));
    }
    expect_pools_empty(*d, "decode");
  }
}

// P restarted on its address under the same engine id: D's first pull from it fails on the
// stale KV endpoint and is recomputed, the next one contacts P anew and loads.
TEST(PdServeFailures, APrefillInstanceRestartedOnItsAddressIsContactedAnew) {
  auto d = serve("restart-decode", {"--role", "decode", "--kv-transport", "tcp"});
  auto p = serve("restart-prefill", {"--role", "prefill", "--kv-transport", "tcp", "--engine-id", "p-fixed"});
  const std::string port = p->url().substr(p->url().rfind(':') + 1);
  const auto loaded = [&] { return metric(testing::get(d->url(), "/metrics").body, "kv_remote_loads_total", "result=\"loaded\""); };
  ASSERT_EQ(hand_off(*p, *d, "/v1/completions", completion(long_prompt(60, 21), 6)).decode.status, 200);
  EXPECT_EQ(loaded(), 1);
  p.reset();
  p = serve("restart-prefill-again", {"--role", "prefill", "--kv-transport", "tcp", "--engine-id", "p-fixed", "--port", port});
  ASSERT_EQ(hand_off(*p, *d, "/v1/completions", completion(long_prompt(60, 22), 6)).decode.status, 200);
  ASSERT_EQ(hand_off(*p, *d, "/v1/completions", completion(long_prompt(60, 23), 6)).decode.status, 200);
  EXPECT_EQ(loaded(), 2);
  EXPECT_EQ(metric(testing::get(d->url(), "/metrics").body, "kv_remote_loads_total", "result=\"recomputed\""), 1);
  expect_pools_empty(*d, "decode");
  expect_pools_empty(*p, "prefill");
}

TEST(PdServeFailures, AnotherModelOnTheOtherSideIsRefusedAtFirstContact) {
  auto p = serve("model-prefill", {"--role", "prefill", "--kv-transport", "tcp"});
  auto d = serve("model-decode", {"--role", "decode", "--kv-transport", "tcp"}, 43);
  const Legs legs = hand_off(*p, *d, "/v1/completions", completion("same words, other weights", 6));
  ASSERT_EQ(legs.prefill.status, 200) << legs.prefill.body;
  EXPECT_EQ(legs.decode.status, 502) << legs.decode.body;
  EXPECT_NE(legs.decode.body.find("another model"), std::string::npos) << legs.decode.body;
  EXPECT_EQ(metric(testing::get(d->url(), "/metrics").body, "kv_transfer_failures_total", "reason=\"mismatch\""), 1);
  expect_pools_empty(*p, "prefill");
  expect_pools_empty(*d, "decode");
}

// The pool sizes itself by bytes: the same --kv-cache-memory holds twice the tokens in
// 16 bits and nearly four times in 8, and /health, /metrics and the proxy's view say so.
TEST(PdServeKv, EachDtypeReportsTheTokensItsMemoryHolds) {
  std::map<std::string, int64_t> tokens;
  for (const char* dtype : {"f32", "bf16", "q8_0", "fp8_e4m3"}) {
    auto u = serve(std::string("capacity-") + dtype, {"--kv-cache-dtype", dtype});
    const json health = testing::get(u->url(), "/health").json();
    EXPECT_EQ(health["capacity"]["kv_cache_dtype"], dtype);
    tokens[dtype] = health["capacity"]["kv_tokens"].get<int64_t>();
    const std::string m = testing::get(u->url(), "/metrics").body;
    EXPECT_EQ(metric(m, "num_kv_tokens_total"), double(tokens[dtype])) << dtype;
    EXPECT_EQ(metric(m, "cache_config_info", std::string("cache_dtype=\"") + dtype + "\""), 1.0) << m;
    const ModelConfig c = ModelConfig::from_gguf(GgufFile(model(42)));
    EXPECT_EQ(health["capacity"]["kv_bytes_per_token"], c.n_layer * c.kv_row_format(*parse_kv_dtype(dtype)).bytes());
  }
  EXPECT_NEAR(double(tokens["bf16"]) / double(tokens["f32"]), 2.0, 0.01);
  EXPECT_GT(double(tokens["q8_0"]) / double(tokens["f32"]), 3.6);
  EXPECT_GT(double(tokens["fp8_e4m3"]) / double(tokens["f32"]), 3.6);
}

TEST(PdServeFailures, AnotherKvDtypeOnTheOtherSideIsRefusedAtFirstContact) {
  auto p = serve("dtype-prefill", {"--role", "prefill", "--kv-transport", "tcp", "--kv-cache-dtype", "f32"});
  auto d = serve("dtype-decode", {"--role", "decode", "--kv-transport", "tcp", "--kv-cache-dtype", "bf16"});
  const Legs legs = hand_off(*p, *d, "/v1/completions", completion("same weights, other cache", 6));
  ASSERT_EQ(legs.prefill.status, 200) << legs.prefill.body;
  EXPECT_EQ(legs.decode.status, 502) << legs.decode.body;
  EXPECT_NE(legs.decode.body.find("lays out its KV cache differently"), std::string::npos) << legs.decode.body;
  EXPECT_NE(legs.decode.body.find("dtype f32 there, bf16 here"), std::string::npos) << legs.decode.body;
  const std::string dm = testing::get(d->url(), "/metrics").body;
  EXPECT_EQ(metric(dm, "kv_transfer_failures_total", "reason=\"mismatch\""), 1);
  EXPECT_EQ(metric(dm, "kv_transfer_bytes_total"), 0);
  expect_pools_empty(*p, "prefill");
  expect_pools_empty(*d, "decode");
}

TEST(PdServeFailures, AClientThatLeavesDuringDecodeFreesBothPools) {
  auto p = serve("leave-prefill", {"--role", "prefill", "--kv-transport", "tcp"});
  auto d = serve("leave-decode", {"--role", "decode", "--kv-transport", "tcp"});
  json body = completion(long_prompt(100, 9), 3000);
  body["ignore_eos"] = true;
  json to_p = body;
  to_p["kv_transfer_params"] = {{"do_remote_decode", true}};
  const Reply pr = testing::post_json(p->url(), "/v1/completions", to_p);
  ASSERT_EQ(pr.status, 200) << pr.body;
  body["kv_transfer_params"] = pr.json()["kv_transfer_params"];
  body["stream"] = true;
  // The client reads two events, then hangs up.
  boost::asio::io_context io;
  http::HttpClient client(http::parse_url(d->url()), http::HttpClientOptions{10s});
  int events = 0;
  http::HttpRequest req;
  req.target = "/v1/completions";
  req.body = body.dump();
  boost::asio::co_spawn(io, client.stream(std::move(req), [&](const http::SseEvent&, http::Clock::time_point) { return ++events < 2; }),
                        [](std::exception_ptr, http::HttpResponse) {});
  io.run();
  EXPECT_EQ(events, 2);
  expect_pools_empty(*d, "decode");
  expect_pools_empty(*p, "prefill");
  EXPECT_EQ(metric(testing::get(d->url(), "/metrics").body, "request_success_total", "finished_reason=\"abort\""), 1);
}

uint16_t port_of(const std::string& url) { return uint16_t(std::stoi(url.substr(url.rfind(':') + 1))); }

TEST(PdServeFailures, AClientThatLeavesDuringThePullFreesBothPools) {
  auto p = serve("pull-leave-prefill", {"--role", "prefill", "--kv-transport", "tcp"});
  auto d = serve("pull-leave-decode", {"--role", "decode", "--kv-transport", "tcp"});
  json body = completion(long_prompt(300, 11), 8);
  json to_p = body;
  to_p["kv_transfer_params"] = {{"do_remote_decode", true}};
  const Reply pr = testing::post_json(p->url(), "/v1/completions", to_p);
  ASSERT_EQ(pr.status, 200) << pr.body;
  // D reaches P through the relay, which lets P's KV bytes through 4 KiB every 20 ms.
  testing::ThrottledKvRelay relay(port_of(p->url()), 20ms);
  body["kv_transfer_params"] = pr.json()["kv_transfer_params"];
  body["kv_transfer_params"]["remote_port"] = relay.http_port();
  {
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket client(io);
    client.connect({boost::asio::ip::make_address("127.0.0.1"), port_of(d->url())});
    const std::string payload = body.dump();
    const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                                "Content-Length: " + std::to_string(payload.size()) + "\r\n\r\n" + payload;
    boost::asio::write(client, boost::asio::buffer(request));
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (relay.kv_bytes() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
    ASSERT_GT(relay.kv_bytes(), 0u) << "the pull never started";
  }  // the client hangs up with the pull under way
  expect_pools_empty(*d, "decode");
  expect_pools_empty(*p, "prefill");
  const std::string metrics = testing::get(d->url(), "/metrics").body;
  EXPECT_EQ(metric(metrics, "kv_transfer_failures_total", "reason=\"cancelled\""), 1);
  EXPECT_EQ(metric(metrics, "kv_transfer_bytes_total"), 0) << "the pull ran to its end";
  EXPECT_EQ(metric(testing::get(p->url(), "/metrics").body, "kv_leases_expired_total"), 0)
      << "D did not release the lease";
}

}  // namespace
}  // namespace moe
