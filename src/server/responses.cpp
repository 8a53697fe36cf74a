#include "server/responses.h"

#include <fmt/format.h>

#include <chrono>
#include <random>

#include "server/api_error.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace moe::server {

namespace {

std::string dump(const Json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

// The stop string, or the stop token id, that ended a request; null for EOS and length.
Json stop_reason(const std::string& stop_string, int32_t stop_token) {
  if (!stop_string.empty()) return stop_string;
  if (stop_token >= 0) return stop_token;
  return nullptr;
}

Json token_bytes_json(const std::string& bytes) {
  Json out = Json::array();
  for (unsigned char c : bytes) out.push_back(int(c));
  return out;
}

}  // namespace

http::Response json_response(std::string body) {
  http::Response res{http::Status::ok, 11};
  res.set(http::Field::content_type, "application/json");
  res.body() = std::move(body);
  return res;
}

std::string new_response_id(Api api) {
  thread_local std::mt19937_64 rng{(uint64_t(std::random_device{}()) << 32) ^ std::random_device{}()};
  return fmt::format("{}-{:016x}{:016x}", api == Api::kChat ? "chatcmpl" : "cmpl", rng(), rng());
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  return Json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

Json logprobs_json(Api api, const Tokenizer& tok, const std::vector<TokenOutput>& tokens, int64_t& text_offset, int32_t top_n) {
  if (api == Api::kChat) {
    Json content = Json::array();
    for (const TokenOutput& t : tokens) {
      const std::string& bytes = tok.token_bytes(t.token);
      Json top = Json::array();
      for (size_t i = 0; i < t.top.size() && int32_t(i) < top_n; ++i) {
        const std::string& b = tok.token_bytes(t.top[i].token);
        top.push_back({{"token", utf8_sanitize(b)}, {"logprob", t.top[i].logprob}, {"bytes", token_bytes_json(b)}});
      }
      content.push_back({{"token", utf8_sanitize(bytes)}, {"logprob", t.logprob}, {"bytes", token_bytes_json(bytes)}, {"top_logprobs", top}});
    }
    return Json{{"content", content}};
  }
  Json offsets = Json::array(), logprobs = Json::array(), strs = Json::array(), tops = Json::array();
  for (const TokenOutput& t : tokens) {
    const std::string s = utf8_sanitize(tok.token_bytes(t.token));
    offsets.push_back(text_offset);
    text_offset += int64_t(s.size());
    logprobs.push_back(t.logprob);
    strs.push_back(s);
    // As vLLM does: the chosen token is always there, so a dict may hold top_n + 1 entries.
    Json top = Json::object();
    for (size_t i = 0; i < t.top.size() && int32_t(i) < top_n; ++i) top[utf8_sanitize(tok.token_bytes(t.top[i].token))] = t.top[i].logprob;
    if (!top.contains(s)) top[s] = t.logprob;
    tops.push_back(top);
  }
  return Json{{"text_offset", offsets}, {"token_logprobs", logprobs}, {"tokens", strs}, {"top_logprobs", tops}};
}

std::string stream_error_event(const std::string& message) { return error_body(internal_error(message)); }

StreamEncoder::StreamEncoder(ResponseMeta meta, const Tokenizer& tok) : meta_(std::move(meta)), tok_(tok) {}

Json StreamEncoder::chunk(Json choice) const {
  Json j{{"id", meta_.id},
         {"object", meta_.api == Api::kChat ? "chat.completion.chunk" : "text_completion"},
         {"created", meta_.created},
         {"model", meta_.model},
         {"choices", Json::array({std::move(choice)})}};
  if (meta_.include_usage) j["usage"] = nullptr;
  return j;
}

std::vector<std::string> StreamEncoder::start() {
  if (meta_.api != Api::kChat) return {};
  return {dump(chunk({{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}}))};
}

std::vector<std::string> StreamEncoder::encode(const RequestOutput& out) {
  std::vector<std::string> events;
  if (out.finish == FinishKind::kError) {
    events.push_back(stream_error_event(out.error.empty() ? "the engine failed the request" : out.error));
    events.push_back("[DONE]");
    return events;
  }
  const bool with_logprobs = meta_.logprobs && !out.tokens.empty();
  if (!out.text.empty() || with_logprobs) {
    Json lp = with_logprobs ? logprobs_json(meta_.api, tok_, out.tokens, text_offset_, meta_.top_logprobs) : Json();
    Json choice{{"index", 0}};
    if (meta_.api == Api::kChat) choice["delta"] = {{"content", out.text}};
    else choice["text"] = out.text;
    choice["logprobs"] = std::move(lp);
    choice["finish_reason"] = nullptr;
    events.push_back(dump(chunk(std::move(choice))));
  }
  if (!out.finished) return events;
  Json last{{"index", 0}};
  if (meta_.api == Api::kChat) last["delta"] = Json::object();
  else last["text"] = "";
  last["logprobs"] = nullptr;
  last["finish_reason"] = finish_kind_name(out.finish);
  last["stop_reason"] = stop_reason(out.stop_string, out.stop_token);
  events.push_back(dump(chunk(std::move(last))));
  if (meta_.include_usage) {
    Json u = chunk(Json());
    u["choices"] = Json::array();
    u["usage"] = usage_json(out.n_prompt_tokens, out.n_output_tokens, out.n_cached_tokens);
    events.push_back(dump(u));
  }
  events.push_back("[DONE]");
  return events;
}

ResponseCollector::ResponseCollector(ResponseMeta meta, const Tokenizer& tok) : meta_(std::move(meta)), tok_(tok) {}

void ResponseCollector::add(const RequestOutput& out) {
  text_ += out.text;
  if (meta_.logprobs) tokens_.insert(tokens_.end(), out.tokens.begin(), out.tokens.end());
  n_prompt_ = out.n_prompt_tokens;
  n_output_ = out.n_output_tokens;
  n_cached_ = out.n_cached_tokens;
  if (!out.finished) return;
  finished_ = true;
  kind_ = out.finish;
  stop_string_ = out.stop_string;
  stop_token_ = out.stop_token;
  if (kind_ == FinishKind::kError) error_ = out.error.empty() ? "the engine failed the request" : out.error;
}

std::string ResponseCollector::body() const {
  Json choice{{"index", 0}};
  if (meta_.api == Api::kChat) choice["message"] = {{"role", "assistant"}, {"content", text_}};
  else choice["text"] = text_;
  int64_t offset = 0;
  choice["logprobs"] = meta_.logprobs ? logprobs_json(meta_.api, tok_, tokens_, offset, meta_.top_logprobs) : Json();
  choice["finish_reason"] = finish_kind_name(kind_);
  choice["stop_reason"] = stop_reason(stop_string_, stop_token_);
  Json j{{"id", meta_.id},
         {"object", meta_.api == Api::kChat ? "chat.completion" : "text_completion"},
         {"created", meta_.created},
         {"model", meta_.model},
         {"choices", Json::array({std::move(choice)})},
         {"usage", usage_json(n_prompt_, n_output_, n_cached_)}};
  return dump(j);
}

}  // namespace moe::server
