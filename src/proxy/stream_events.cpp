#include "proxy/stream_events.h"

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

Relay StreamRewriter::prefill_event(std::string_view data) {
  if (handed_off()) return {};
  if (data == kDone) {
    done_ = true;
    return {std::string(data), false};
  }
  std::optional<Json> chunk = own_chunk(data);
  if (!chunk) return {std::string(data), false};
  Json* choice = first_choice(*chunk);
  const bool text = choice && !choice_text(*choice).empty();
  const Json* finish = choice ? member(*choice, "finish_reason") : nullptr;
  if (finish && !finish->is_null() && !whole_) {
    handoff_ = handoff_of(*chunk);
    if (handed_off()) {
      if (!text) return {};
      // The request goes on at D, which sends the real finish_reason and stop_reason.
      (*choice)["finish_reason"] = nullptr;
      choice->erase("stop_reason");
    }
  }
  if (choice) p_text_.add(*choice);
  make_own(*chunk, id_);
  return {dump(*chunk), text};
}

Relay StreamRewriter::decode_event(std::string_view data) {
  if (data == kDone) {
    done_ = true;
    return {std::string(data), false};
  }
  std::optional<Json> chunk = own_chunk(data);
  if (!chunk) return {std::string(data), false};
  bool text = false;
  if (Json* choice = first_choice(*chunk)) {
    text = !choice_text(*choice).empty();
    if (const auto lp = choice->find("logprobs"); lp != choice->end()) shift_text_offsets(*lp, p_text_.bytes());
  }
  make_own(*chunk, id_);
  return {dump(*chunk), text};
}

}  // namespace moe::proxy
