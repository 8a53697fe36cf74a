#include "proxy/request_estimate.h"

#include <algorithm>

namespace moe::proxy {

namespace {

int64_t text_tokens(const std::string& text) { return int64_t(text.size() + 3) / 4; }

int64_t content_tokens(const Json& content) {
  if (content.is_string()) return text_tokens(content.get<std::string>());
  int64_t n = 0;
  if (content.is_array()) {
    for (const Json& part : content) {
      const Json* text = part.is_object() ? member(part, "text") : nullptr;
      if (text && text->is_string()) n += text_tokens(text->get<std::string>());
    }
  }
  return n;
}

// The chat template's tokens around each message (role markers, separators).
constexpr int64_t kTokensPerMessage = 4;

}  // namespace

int64_t estimate_prompt_tokens(Api api, const Json& body) {
  int64_t n = 0;
  if (api == Api::kChat) {
    const Json* messages = member(body, "messages");
    if (messages && messages->is_array()) {
      for (const Json& m : *messages) {
        const Json* content = m.is_object() ? member(m, "content") : nullptr;
        n += kTokensPerMessage + (content ? content_tokens(*content) : 0);
      }
    }
  } else if (const Json* prompt = member(body, "prompt")) {
    if (prompt->is_string()) {
      n = text_tokens(prompt->get<std::string>());
    } else if (prompt->is_array() && !prompt->empty()) {
      // Token ids, or a list of prompts of which the first is what one choice runs.
      const Json& first = prompt->front();
      n = first.is_number_integer() ? int64_t(prompt->size())
          : first.is_string()       ? text_tokens(first.get<std::string>())
          : first.is_array()        ? int64_t(first.size())
                                    : 0;
    }
  }
  return std::max<int64_t>(1, n);
}

routing::RoutingRequest routing_request(Api api, const Json& body, std::string id, double arrival_s) {
  routing::RoutingRequest r;
  r.id = std::move(id);
  r.prompt_tokens = estimate_prompt_tokens(api, body);
  r.expected_output_tokens = kDefaultExpectedOutput;
  for (const char* key : {"max_completion_tokens", "max_tokens"}) {
    const Json* v = member(body, key);
    if (v && v->is_number_integer() && v->get<int64_t>() > 0) {
      r.expected_output_tokens = v->get<int64_t>();
      break;
    }
  }
  r.arrival_s = arrival_s;
  return r;
}

}  // namespace moe::proxy
