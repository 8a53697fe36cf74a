#include "proxy/merge.h"

#include <fmt/format.h>

#include <chrono>
#include <random>

#include "proxy/errors.h"

namespace moe::proxy {

namespace {

const Json& first_choice(const Json& answer) {
  const Json* choices = member(answer, "choices");
  if (!choices || !choices->is_array() || choices->empty() || !(*choices)[0].is_object()) {
    throw ProtocolError("its answer has no choices[0]");
  }
  return (*choices)[0];
}

// a + b for two JSON arrays, a missing or non-array one counting as empty.
Json concat(const Json* a, const Json* b) {
  Json out = a && a->is_array() ? *a : Json::array();
  if (b && b->is_array()) out.insert(out.end(), b->begin(), b->end());
  return out;
}

// Completions: {"text_offset", "token_logprobs", "tokens", "top_logprobs"}, list by list;
// chat: {"content": [...]}. Null when either side has none: a partial list would misstate
// which tokens it covers.
Json join_logprobs(Api api, const Json* p, const Json* d, int64_t base) {
  if (!p || !d || !p->is_object() || !d->is_object()) return nullptr;
  Json out = *p;
  if (api == Api::kChat) {
    out["content"] = concat(member(*p, "content"), member(*d, "content"));
    return out;
  }
  Json shifted = *d;
  shift_text_offsets(shifted, base);
  for (const char* key : {"text_offset", "token_logprobs", "tokens", "top_logprobs"}) {
    out[key] = concat(member(*p, key), member(shifted, key));
  }
  return out;
}

}  // namespace

const Json* member(const Json& j, std::string_view key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

std::string choice_text(const Json& choice) {
  if (const Json* t = member(choice, "text"); t && t->is_string()) return t->get<std::string>();
  for (const char* holder : {"message", "delta"}) {
    const Json* h = member(choice, holder);
    const Json* c = h ? member(*h, "content") : nullptr;
    if (c && c->is_string()) return c->get<std::string>();
  }
  return "";
}

Identity new_identity(Api api) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = api == Api::kChat ? "chatcmpl-" : "cmpl-";
  id += fmt::format("{:016x}{:016x}", rng(), rng());
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return Identity{std::move(id), std::chrono::duration_cast<std::chrono::seconds>(now).count()};
}

Json parse_client_body(std::string_view body) {
  Json j = Json::parse(body, nullptr, false);
  if (j.is_discarded()) throw invalid_json("the request body is not valid JSON");
  if (!j.is_object()) throw invalid_json("the request body must be a JSON object");
  // Each choice would need its own hand-off, and P answers a request with one.
  if (const Json* n = member(j, "n"); n && n->is_number_integer() && n->get<int64_t>() > 1) {
    throw unsupported("n", "n > 1 is not supported behind the P/D proxy yet");
  }
  return j;
}

bool wants_stream(const Json& client_body) {
  const Json* s = member(client_body, "stream");
  return s && s->is_boolean() && s->get<bool>();
}

Json prefill_body(Json client_body) {
  client_body["kv_transfer_params"] = Json{{"do_remote_decode", true}};
  return client_body;
}

Json decode_body(Json client_body, const Json& handoff) {
  client_body["kv_transfer_params"] = handoff;
  client_body.erase("echo");
  client_body.erase("prompt_logprobs");
  return client_body;
}

Json parse_answer(std::string_view body) {
  Json j = Json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw ProtocolError("its answer is not a JSON object");
  return j;
}

Json handoff_of(const Json& p_answer) {
  first_choice(p_answer);
  const Json* h = member(p_answer, "kv_transfer_params");
  if (!h) throw ProtocolError("its answer has no \"kv_transfer_params\" (is it a `moengine serve --role prefill`?)");
  if (!h->is_null() && !h->is_object()) throw ProtocolError("its \"kv_transfer_params\" is neither null nor an object");
  return *h;
}

void make_own(Json& answer, const Identity& id) {
  answer["id"] = id.id;
  answer["created"] = id.created;
  answer.erase("kv_transfer_params");
}

Json merge_answers(Api api, const Json& p_answer, Json d_answer, const Identity& id) {
  const Json& p = first_choice(p_answer);
  first_choice(d_answer);
  make_own(d_answer, id);
  Json& d = d_answer["choices"][0];
  TextEnd end;
  end.add(p);
  const std::string text = choice_text(p) + choice_text(d);
  if (api == Api::kChat) {
    if (!d["message"].is_object()) d["message"] = Json::object();
    d["message"]["content"] = text;
  } else {
    d["text"] = text;
  }
  Json logprobs = join_logprobs(api, member(p, "logprobs"), member(d, "logprobs"), end.bytes());
  d["logprobs"] = std::move(logprobs);
  return d_answer;
}

void TextEnd::add(const Json& p_choice) {
  text_bytes_ += int64_t(choice_text(p_choice).size());
  const Json* lp = member(p_choice, "logprobs");
  const Json* offsets = lp ? member(*lp, "text_offset") : nullptr;
  const Json* tokens = lp ? member(*lp, "tokens") : nullptr;
  if (!offsets || !tokens || !offsets->is_array() || !tokens->is_array() || offsets->empty() || tokens->empty()) return;
  if (!offsets->back().is_number_integer() || !tokens->back().is_string()) return;
  logprobs_end_ = offsets->back().get<int64_t>() + int64_t(tokens->back().get_ref<const std::string&>().size());
}

void shift_text_offsets(Json& logprobs, int64_t base) {
  if (!logprobs.is_object()) return;
  const auto it = logprobs.find("text_offset");
  if (it == logprobs.end() || !it->is_array()) return;
  for (Json& offset : *it) {
    if (offset.is_number_integer()) offset = offset.get<int64_t>() + base;
  }
}

}  // namespace moe::proxy
