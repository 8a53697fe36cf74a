#pragma once
// What the P/D tests compare, and how they check that nothing is left held: between a unified instance and a disaggregated deployment:
// the text, finish reason, usage and (when asked for) logprobs of an answer, whether it
// came whole or as a stream of Server-Sent Events.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "support/http_calls.h"
#include "support/serve_process.h"

namespace moe::testing {

struct Answer {
  int status = 0;
  std::string text;
  std::string finish_reason;
  nlohmann::json usage;
  nlohmann::json logprobs;  // completions: the lists joined; chat: content joined
  std::string error;        // the body of a failed answer
};

inline void join_logprobs(nlohmann::json& into, const nlohmann::json& part) {
  if (part.is_null()) return;
  if (into.is_null()) {
    into = part;
    return;
  }
  for (auto& [key, value] : part.items()) {
    for (const auto& v : value) into[key].push_back(v);
  }
}

inline void add_choice(Answer& a, const nlohmann::json& c) {
  if (c.contains("message")) a.text += c["message"].value("content", "");
  else if (c.contains("delta")) a.text += c["delta"].value("content", "");
  else a.text += c.value("text", "");
  if (c.contains("logprobs")) join_logprobs(a.logprobs, c["logprobs"]);
  if (c.contains("finish_reason") && !c["finish_reason"].is_null()) a.finish_reason = c["finish_reason"];
}

// One request, whole or streamed as `body["stream"]` says.
inline Answer ask(const std::string& base_url, const std::string& path, const nlohmann::json& body) {
  Answer a;
  const bool stream = body.value("stream", false);
  std::vector<std::string> events;
  const Reply r = http_call(base_url, "POST", path, body.dump(), stream ? &events : nullptr);
  a.status = r.status;
  if (r.status != 200) {
    a.error = r.body;
    return a;
  }
  if (!stream) {
    const nlohmann::json j = nlohmann::json::parse(r.body);
    add_choice(a, j["choices"][0]);
    a.usage = j["usage"];
    return a;
  }
  for (const std::string& e : events) {
    if (e == "[DONE]") continue;
    const nlohmann::json j = nlohmann::json::parse(e);
    if (j.contains("error")) a.error = e;
    if (j.contains("usage") && !j["usage"].is_null()) a.usage = j["usage"];
    if (j.contains("choices") && !j["choices"].empty()) add_choice(a, j["choices"][0]);
  }
  if (events.empty() || events.back() != "[DONE]") a.error += " (the stream did not end with [DONE])";
  return a;
}

inline int64_t usage_count(const nlohmann::json& usage, const char* key) {
  return usage.is_object() ? usage.value(key, int64_t(-1)) : -1;
}

inline void expect_same_answer(const Answer& want, const Answer& got, const std::string& what) {
  EXPECT_EQ(got.status, want.status) << what << ": " << got.error;
  EXPECT_EQ(got.error, want.error) << what;
  EXPECT_EQ(got.text, want.text) << what;
  EXPECT_EQ(got.finish_reason, want.finish_reason) << what;
  EXPECT_EQ(usage_count(got.usage, "prompt_tokens"), usage_count(want.usage, "prompt_tokens")) << what;
  EXPECT_EQ(usage_count(got.usage, "completion_tokens"), usage_count(want.usage, "completion_tokens")) << what;
  EXPECT_EQ(got.logprobs, want.logprobs) << what;
}

// Both block pools empty and no lease left, within a few seconds (releases and aborts
// reach the engines asynchronously).
inline void expect_pools_empty(ServeProcess& s, const std::string& who) {
  std::string page;
  for (int i = 0; i < 100; ++i) {
    page = get(s.url(), "/metrics").body;
    if (metric(page, "num_kv_blocks_used") == 0 && metric(page, "kv_leases_active") == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ADD_FAILURE() << who << " still holds blocks: used " << metric(page, "num_kv_blocks_used") << ", leases "
                << metric(page, "kv_leases_active");
}

}  // namespace moe::testing
