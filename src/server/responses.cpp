#include "server/responses.h"

#include <fmt/format.h>

#include <chrono>
#include <random>
#include <utility>

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

Json echo_logprobs_json(const Tokenizer& tok, const std::vector<int32_t>& prompt, const std::vector<TokenOutput>& prompt_logprobs,
                        const std::vector<TokenOutput>& generated, int64_t& text_offset, int32_t top_n) {
  std::vector<TokenOutput> all;
  all.reserve(prompt_logprobs.size() + generated.size() + 1);
  if (!prompt.empty()) all.push_back({prompt[0], 0.0f, {}});
  all.insert(all.end(), prompt_logprobs.begin(), prompt_logprobs.end());
  all.insert(all.end(), generated.begin(), generated.end());
  Json j = logprobs_json(Api::kCompletion, tok, all, text_offset, top_n);
  if (!prompt.empty()) j["token_logprobs"][0] = nullptr, j["top_logprobs"][0] = nullptr;
  return j;
}

std::string stream_error_event(const std::string& message) { return error_body(internal_error(message)); }

void UsageTally::record(int32_t index, const RequestOutput& out) {
  if (index == 0) prompt_ = out.n_prompt_tokens, cached_ = out.n_cached_tokens;
  output_[size_t(index)] = out.n_output_tokens;
  // Only a final output counts its drafts.
  if (out.finished) drafted_[size_t(index)] = out.n_draft_tokens, accepted_[size_t(index)] = out.n_accepted_tokens;
}

Json UsageTally::json() const {
  int64_t output = 0, drafted = 0, accepted = 0;
  for (size_t i = 0; i < output_.size(); ++i) output += output_[i], drafted += drafted_[i], accepted += accepted_[i];
  Json u = usage_json(prompt_, output, cached_);
  if (drafted > 0) {
    u["completion_tokens_details"] = {{"accepted_prediction_tokens", accepted}, {"rejected_prediction_tokens", drafted - accepted}};
  }
  return u;
}

StreamEncoder::StreamEncoder(ResponseMeta meta, const Tokenizer& tok)
    : meta_(std::move(meta)),
      tok_(tok),
      text_offset_(size_t(meta_.choices), 0),
      started_(size_t(meta_.choices), false),
      pending_ids_(size_t(meta_.choices), Json::array()),
      open_(meta_.choices),
      usage_(meta_.choices) {}

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
  if (meta_.api != Api::kChat || meta_.continuation) return {};
  std::vector<std::string> events;
  for (int32_t i = 0; i < meta_.choices; ++i) {
    events.push_back(dump(chunk({{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}})));
  }
  return events;
}

std::vector<std::string> StreamEncoder::encode(int32_t index, const RequestOutput& out) {
  std::vector<std::string> events;
  if (done_) return events;
  if (out.finish == FinishKind::kError) {
    events.push_back(stream_error_event(out.error.empty() ? "the engine failed the request" : out.error));
    events.push_back("[DONE]");
    done_ = true;
    return events;
  }
  usage_.record(index, out);
  if (meta_.echo() && !started_[size_t(index)]) {
    Json choice{{"index", index}, {"text", meta_.echo_text}};
    choice["logprobs"] = meta_.logprobs ? echo_logprobs_json(tok_, meta_.echo_tokens, out.prompt_logprobs, {}, text_offset_[size_t(index)], meta_.top_logprobs)
                                        : Json();
    choice["finish_reason"] = nullptr;
    events.push_back(dump(chunk(std::move(choice))));
  }
  started_[size_t(index)] = true;
  Json& ids = pending_ids_[size_t(index)];
  if (meta_.token_ids) {
    for (const TokenOutput& t : out.tokens) ids.push_back(t.token);
  }
  const bool with_logprobs = meta_.logprobs && !out.tokens.empty();
  if (!out.text.empty() || with_logprobs) {
    Json lp = with_logprobs ? logprobs_json(meta_.api, tok_, out.tokens, text_offset_[size_t(index)], meta_.top_logprobs) : Json();
    Json choice{{"index", index}};
    if (meta_.api == Api::kChat) choice["delta"] = {{"content", out.text}};
    else choice["text"] = out.text;
    choice["logprobs"] = std::move(lp);
    choice["finish_reason"] = nullptr;
    if (meta_.token_ids) choice["token_ids"] = std::exchange(ids, Json::array());
    events.push_back(dump(chunk(std::move(choice))));
  }
  if (!out.finished) return events;
  Json last{{"index", index}};
  if (meta_.api == Api::kChat) last["delta"] = Json::object();
  else last["text"] = "";
  last["logprobs"] = nullptr;
  last["finish_reason"] = finish_kind_name(out.finish);
  last["stop_reason"] = stop_reason(out.stop_string, out.stop_token);
  if (meta_.token_ids) last["token_ids"] = std::exchange(ids, Json::array());
  Json finish_chunk = chunk(std::move(last));
  if (meta_.kv_transfer) finish_chunk["kv_transfer_params"] = meta_.kv_transfer(out);
  events.push_back(dump(finish_chunk));
  if (--open_ > 0) return events;
  if (meta_.include_usage) {
    Json u = chunk(Json());
    u["choices"] = Json::array();
    u["usage"] = usage_.json();
    events.push_back(dump(u));
  }
  events.push_back("[DONE]");
  done_ = true;
  return events;
}

ResponseCollector::ResponseCollector(ResponseMeta meta, const Tokenizer& tok)
    : meta_(std::move(meta)), tok_(tok), choices_(size_t(meta_.choices)), open_(meta_.choices), usage_(meta_.choices) {}

void ResponseCollector::add(int32_t index, const RequestOutput& out) {
  Choice& c = choices_[size_t(index)];
  c.text += out.text;
  if (!out.prompt_logprobs.empty()) c.prompt_logprobs = out.prompt_logprobs;
  if (meta_.logprobs) c.tokens.insert(c.tokens.end(), out.tokens.begin(), out.tokens.end());
  usage_.record(index, out);
  if (!out.finished) return;
  --open_;
  c.kind = out.finish;
  c.stop_string = out.stop_string;
  c.stop_token = out.stop_token;
  if (meta_.kv_transfer) c.kv_transfer = meta_.kv_transfer(out);
  if (c.kind == FinishKind::kError) error_ = out.error.empty() ? "the engine failed the request" : out.error;
}

std::string ResponseCollector::body() const {
  Json choices = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    Json choice{{"index", i}};
    if (meta_.api == Api::kChat) choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    else choice["text"] = meta_.echo() ? meta_.echo_text + c.text : c.text;
    int64_t offset = 0;
    if (!meta_.logprobs) choice["logprobs"] = Json();
    else if (meta_.echo()) choice["logprobs"] = echo_logprobs_json(tok_, meta_.echo_tokens, c.prompt_logprobs, c.tokens, offset, meta_.top_logprobs);
    else choice["logprobs"] = logprobs_json(meta_.api, tok_, c.tokens, offset, meta_.top_logprobs);
    choice["finish_reason"] = finish_kind_name(c.kind);
    choice["stop_reason"] = stop_reason(c.stop_string, c.stop_token);
    choices.push_back(std::move(choice));
  }
  Json j{{"id", meta_.id},
         {"object", meta_.api == Api::kChat ? "chat.completion" : "text_completion"},
         {"created", meta_.created},
         {"model", meta_.model},
         {"choices", std::move(choices)},
         {"usage", usage_.json()}};
  if (meta_.kv_transfer) j["kv_transfer_params"] = choices_[0].kv_transfer;
  return dump(j);
}

}  // namespace moe::server
