#include "proxy/resume.h"

namespace moe::proxy {

namespace {

// What shapes the continuation; everything else (messages, echo, n, logprobs) is either
// in the token ids or excluded by resumable().
constexpr const char* kCarried[] = {"model",       "temperature",       "top_p",           "top_k",
                                    "min_p",       "repetition_penalty", "presence_penalty", "frequency_penalty",
                                    "stop",        "stop_token_ids",    "ignore_eos",      "skip_special_tokens",
                                    "logit_bias",  "seed",              "priority",        "stream_options"};

bool truthy(const Json* v) { return v && ((v->is_boolean() && v->get<bool>()) || (v->is_number() && v->get<double>() != 0)); }

}  // namespace

bool resumable(const Json& client_body) {
  return !truthy(member(client_body, "logprobs")) && !truthy(member(client_body, "echo")) &&
         !truthy(member(client_body, "top_logprobs")) && !member(client_body, "prompt_logprobs");
}

std::optional<Json> resume_body(const Json& client_body, const std::vector<int32_t>& prompt_ids,
                                const std::vector<int32_t>& generated) {
  Json body = Json::object();
  for (const char* key : kCarried) {
    if (const Json* v = member(client_body, key)) body[key] = *v;
  }
  for (const char* key : {"max_completion_tokens", "max_tokens"}) {
    const Json* v = member(client_body, key);
    if (!v || !v->is_number_integer()) continue;
    const int64_t left = v->get<int64_t>() - int64_t(generated.size());
    if (left <= 0) return std::nullopt;
    body["max_tokens"] = left;
    break;
  }
  std::vector<int32_t> prompt = prompt_ids;
  prompt.insert(prompt.end(), generated.begin(), generated.end());
  body["prompt"] = prompt;
  body["stream"] = true;
  return body;
}

}  // namespace moe::proxy
