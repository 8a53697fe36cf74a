#include "proxy/stream_events.h"

#include "proxy/chunk_splice.h"

namespace moe::proxy {

namespace {

constexpr std::string_view kDone = "[DONE]";

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json* first_choice(Json& chunk) {
  const auto it = chunk.find("choices");
  if (it == chunk.end() || !it->is_array() || it->empty() || !(*it)[0].is_object()) return nullptr;
  return &(*it)[0];
}

}  // namespace

std::optional<Json> StreamRewriter::own_chunk(std::string_view data) const {
  Json j = Json::parse(data, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.contains("error")) return std::nullopt;
  return j;
}

std::optional<Relay> StreamRewriter::spliced(std::string_view data) const {
  std::optional<SplicedChunk> c = splice_chunk(data, id_.id, id_.created, keep_token_ids_);
  if (!c) return std::nullopt;
  Relay r;
  r.data = std::move(c->data);
  r.text = c->text;
  r.token_ids = std::move(c->token_ids);
  return r;
}

Relay StreamRewriter::prefill_event(std::string_view data) {
  if (handed_off()) return {};
  if (data == kDone) {
    done_ = true;
    return {std::string(data), false};
  }
  // A unified instance's whole answer: no hand-off to look for, and no text of P's for D's
  // offsets to be moved past.
  if (whole_) {
    if (std::optional<Relay> r = spliced(data)) return std::move(*r);
  }
  std::optional<Json> chunk = own_chunk(data);
  if (!chunk) return {std::string(data), false};
  Json* choice = first_choice(*chunk);
  Relay r;
  take_token_ids(choice, r);
  const bool text = choice && !choice_text(*choice).empty();
  const Json* finish = choice ? member(*choice, "finish_reason") : nullptr;
  if (finish && !finish->is_null() && !whole_) {
    handoff_ = handoff_of(*chunk);
    if (handed_off()) {
      if (!text) return r;
      // The request goes on at D, which sends the real finish_reason and stop_reason.
      (*choice)["finish_reason"] = nullptr;
      choice->erase("stop_reason");
    }
  }
  if (choice) p_text_.add(*choice);
  make_own(*chunk, id_);
  r.data = dump(*chunk);
  r.text = text;
  return r;
}

Relay StreamRewriter::decode_event(std::string_view data) {
  if (data == kDone) {
    done_ = true;
    return {std::string(data), false};
  }
  if (std::optional<Relay> r = spliced(data)) return std::move(*r);
  std::optional<Json> chunk = own_chunk(data);
  if (!chunk) return {std::string(data), false};
  Relay r;
  if (Json* choice = first_choice(*chunk)) {
    take_token_ids(choice, r);
    r.text = !choice_text(*choice).empty();
    if (const auto lp = choice->find("logprobs"); lp != choice->end()) shift_text_offsets(*lp, p_text_.bytes());
  }
  make_own(*chunk, id_);
  r.data = dump(*chunk);
  return r;
}

void StreamRewriter::take_token_ids(Json* choice, Relay& r) const {
  if (choice == nullptr) return;
  const auto it = choice->find("token_ids");
  if (it == choice->end()) return;
  if (it->is_array()) {
    for (const Json& id : *it) {
      if (id.is_number_integer()) r.token_ids.push_back(id.get<int32_t>());
    }
  }
  if (!keep_token_ids_) choice->erase(it);
}

std::string ResumeConverter::convert(const std::string& event) const {
  Json j = Json::parse(event, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.contains("error")) return event;
  if (Json* usage = j.contains("usage") && j["usage"].is_object() ? &j["usage"] : nullptr) {
    const int64_t completion = usage->value("completion_tokens", int64_t{0}) + generated_before_;
    (*usage)["prompt_tokens"] = prompt_tokens_;
    (*usage)["completion_tokens"] = completion;
    (*usage)["total_tokens"] = prompt_tokens_ + completion;
    if (usage->contains("prompt_tokens_details")) usage->erase("prompt_tokens_details");
  }
  if (api_ == Api::kChat) {
    j["object"] = "chat.completion.chunk";
    if (Json* choice = first_choice(j)) {
      const std::string text = choice->value("text", std::string());
      const bool finished = choice->contains("finish_reason") && !(*choice)["finish_reason"].is_null();
      choice->erase("text");
      (*choice)["delta"] = text.empty() && finished ? Json::object() : Json{{"content", text}};
    }
  }
  return dump(j);
}

}  // namespace moe::proxy
