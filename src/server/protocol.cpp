#include "server/protocol.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "server/api_error.h"

namespace moe::server {

namespace {

// Fields read with their types checked; values are checked in a second pass, so a request
// with a mistyped field is a 422 whatever else it gets wrong.
struct RawGeneration {
  std::optional<std::string> model;
  std::string max_tokens_param = "max_tokens";
  std::optional<int64_t> max_tokens, n, best_of, top_k, seed, priority, logprobs_n, top_logprobs;
  std::optional<double> temperature, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty;
  std::optional<std::vector<std::string>> stop;
  std::optional<std::vector<int64_t>> stop_token_ids;
  std::optional<bool> stream, ignore_eos, skip_special_tokens, logprobs_flag, echo, include_usage, return_token_ids;
  const Json* logit_bias = nullptr;
  const Json* response_format = nullptr;
  const Json* stream_options = nullptr;
  const Json* kv_transfer_params = nullptr;
  std::optional<std::string> suffix;
};

void read_common(const FieldReader& f, RawGeneration& r) {
  r.model = f.string("model");
  r.n = f.integer("n");
  r.best_of = f.integer("best_of");
  r.temperature = f.number("temperature");
  r.top_p = f.number("top_p");
  r.top_k = f.integer("top_k");
  r.min_p = f.number("min_p");
  r.repetition_penalty = f.number("repetition_penalty");
  r.presence_penalty = f.number("presence_penalty");
  r.frequency_penalty = f.number("frequency_penalty");
  r.seed = f.integer("seed");
  r.stop = f.strings("stop");
  r.stop_token_ids = f.integers("stop_token_ids");
  r.ignore_eos = f.boolean("ignore_eos");
  r.skip_special_tokens = f.boolean("skip_special_tokens");
  r.priority = f.integer("priority");
  r.stream = f.boolean("stream");
  r.echo = f.boolean("echo");
  r.return_token_ids = f.boolean("return_token_ids");
  r.logit_bias = f.object("logit_bias");
  r.response_format = f.object("response_format");
  r.stream_options = f.object("stream_options");
  r.kv_transfer_params = f.object("kv_transfer_params");
  if (r.stream_options) r.include_usage = FieldReader(*r.stream_options, "stream_options").boolean("include_usage");
}

std::string num(double v) { return fmt::format("{}", v); }

void check_range(const std::optional<double>& v, const char* name, double lo, double hi, bool lo_open = false) {
  if (!v) return;
  const bool ok = std::isfinite(*v) && (lo_open ? *v > lo : *v >= lo) && *v <= hi;
  if (!ok) throw invalid_value(name, fmt::format("\"{}\" must be in {}{}, {}], got {}", name, lo_open ? "(" : "[", num(lo), num(hi), num(*v)));
}

// {"token id": bias}: ids as decimal strings (OpenAI's form), biases in [-100, 100]. Ids
// past the vocabulary are refused by fit_to_context, which knows its size.
std::vector<std::pair<int32_t, float>> read_logit_bias(const Json& bias) {
  std::vector<std::pair<int32_t, float>> out;
  for (const auto& [key, value] : bias.items()) {
    int32_t id = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size() || id < 0) {
      throw invalid_value("logit_bias", fmt::format("\"logit_bias\" keys must be token ids (integers >= 0), got \"{}\"", key));
    }
    if (!value.is_number()) {
      throw wrong_type("logit_bias", fmt::format("\"logit_bias\" values must be numbers, got {} for token {}", describe_json(value), key));
    }
    const double b = value.get<double>();
    if (!(b >= -100.0 && b <= 100.0)) {
      throw invalid_value("logit_bias", fmt::format("\"logit_bias\" for token {} must be in [-100, 100], got {}", key, num(b)));
    }
    out.emplace_back(id, float(b));
  }
  return out;
}

// Second pass: values, then the fields OpenAI defines that this server does not implement.
GenerationFields finish_common(const RawGeneration& r, bool chat) {
  GenerationFields g;
  g.model = r.model;
  if (r.n && (*r.n < 1 || *r.n > kMaxChoices)) {
    throw invalid_value("n", fmt::format("\"n\" must be in [1, {}], got {}", kMaxChoices, *r.n));
  }
  g.n = int32_t(r.n.value_or(1));
  // best_of > n (drawing more and returning the best) is not built; best_of = n is plain n.
  if (r.best_of && *r.best_of != 1 && *r.best_of != g.n) {
    throw unsupported("best_of", fmt::format("\"best_of\" must be 1 or equal to \"n\" ({}): returning the best of more choices is not supported, got {}",
                                             g.n, *r.best_of));
  }
  if (r.echo && *r.echo && chat) throw unsupported("echo", "\"echo\": true is supported for completions only");
  g.echo = !chat && r.echo.value_or(false);
  if (r.suffix && !r.suffix->empty()) throw unsupported("suffix", "\"suffix\" is not supported");
  if (r.response_format) {
    const std::optional<std::string> type = FieldReader(*r.response_format, "response_format").string("type");
    if (type && *type != "text") {
      throw unsupported("response_format", fmt::format("\"response_format\" of type \"{}\" is not supported; only \"text\"", *type));
    }
  }
  if (r.max_tokens && *r.max_tokens < 1) {
    throw invalid_value(r.max_tokens_param, fmt::format("\"{}\" must be at least 1, got {}", r.max_tokens_param, *r.max_tokens));
  }
  g.max_tokens = r.max_tokens;
  g.max_tokens_param = r.max_tokens_param;

  SamplingParams& s = g.params.sampling;
  if (r.temperature) {
    if (!(std::isfinite(*r.temperature) && *r.temperature >= 0.0)) {
      throw invalid_value("temperature", fmt::format("\"temperature\" must be a finite number >= 0, got {}", num(*r.temperature)));
    }
    s.temperature = float(*r.temperature);
  }
  check_range(r.top_p, "top_p", 0.0, 1.0, true);
  if (r.top_p) s.top_p = float(*r.top_p);
  if (r.top_k) {
    if (*r.top_k < -1 || *r.top_k > INT32_MAX) {
      throw invalid_value("top_k", fmt::format("\"top_k\" must be -1 or 0 (off) or at least 1, got {}", *r.top_k));
    }
    s.top_k = int32_t(*r.top_k);
  }
  check_range(r.min_p, "min_p", 0.0, 1.0);
  if (r.min_p) s.min_p = float(*r.min_p);
  if (r.repetition_penalty) {
    if (!(std::isfinite(*r.repetition_penalty) && *r.repetition_penalty > 0.0)) {
      throw invalid_value("repetition_penalty",
                          fmt::format("\"repetition_penalty\" must be a finite number > 0, got {}", num(*r.repetition_penalty)));
    }
    s.repetition_penalty = float(*r.repetition_penalty);
  }
  check_range(r.presence_penalty, "presence_penalty", -2.0, 2.0);
  if (r.presence_penalty) s.presence_penalty = float(*r.presence_penalty);
  check_range(r.frequency_penalty, "frequency_penalty", -2.0, 2.0);
  if (r.frequency_penalty) s.frequency_penalty = float(*r.frequency_penalty);
  if (r.seed) s.seed = uint64_t(*r.seed);
  if (r.logit_bias) s.logit_bias = read_logit_bias(*r.logit_bias);

  if (chat) {
    s.logprobs = r.logprobs_flag.value_or(false);
    if (r.top_logprobs) {
      if (*r.top_logprobs < 0 || *r.top_logprobs > 20) {
        throw invalid_value("top_logprobs", fmt::format("\"top_logprobs\" must be in [0, 20], got {}", *r.top_logprobs));
      }
      if (*r.top_logprobs > 0 && !s.logprobs) {
        throw invalid_value("top_logprobs", "\"top_logprobs\" needs \"logprobs\": true");
      }
      s.top_logprobs = int32_t(*r.top_logprobs);
    }
  } else if (r.logprobs_n) {
    if (*r.logprobs_n < 0 || *r.logprobs_n > 20) {
      throw invalid_value("logprobs", fmt::format("\"logprobs\" must be in [0, 20], got {}", *r.logprobs_n));
    }
    s.logprobs = true;
    s.top_logprobs = int32_t(*r.logprobs_n);
    // The echoed prompt carries logprobs too.
    if (g.echo) g.params.prompt_logprobs = s.top_logprobs;
  }

  if (r.stop) {
    for (const std::string& st : *r.stop) {
      if (st.empty()) throw invalid_value("stop", "\"stop\" strings must not be empty");
    }
    g.params.stop = *r.stop;
  }
  if (r.stop_token_ids) {
    for (int64_t t : *r.stop_token_ids) {
      if (t < 0 || t > INT32_MAX) throw invalid_value("stop_token_ids", fmt::format("\"stop_token_ids\" has the invalid token id {}", t));
      g.params.stop_token_ids.push_back(int32_t(t));
    }
  }
  g.params.ignore_eos = r.ignore_eos.value_or(false);
  g.params.skip_special_tokens = r.skip_special_tokens.value_or(true);
  if (r.priority) {
    if (*r.priority < INT32_MIN || *r.priority > INT32_MAX) {
      throw invalid_value("priority", fmt::format("\"priority\" must fit in 32 bits, got {}", *r.priority));
    }
    g.params.priority = int32_t(*r.priority);
  }
  g.stream = r.stream.value_or(false);
  if (r.stream_options && !g.stream) {
    throw invalid_value("stream_options", "\"stream_options\" is only allowed when \"stream\" is true");
  }
  g.include_usage = r.include_usage.value_or(false);
  g.return_token_ids = r.return_token_ids.value_or(false);
  if (r.kv_transfer_params) {
    try {
      g.kv_transfer = disagg::parse_kv_transfer_params(*r.kv_transfer_params);
    } catch (const Error& e) {
      throw invalid_value("kv_transfer_params", e.what());
    }
    if (g.n != 1) throw unsupported("n", "\"n\" must be 1 with kv_transfer_params: a hand-off carries one sequence");
  }
  return g;
}

// The text of a message's content: a string, or text parts joined with newlines.
std::string message_text(const Json& content, const std::string& path) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    throw wrong_type(path, fmt::format("\"{}\" must be a string or an array of content parts, got {}", path, describe_json(content)));
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string part_path = fmt::format("{}[{}]", path, i);
    if (!content[i].is_object()) {
      throw wrong_type(part_path, fmt::format("\"{}\" must be an object, got {}", part_path, describe_json(content[i])));
    }
    const FieldReader part(content[i], part_path);
    const std::string type = part.required_string("type");
    if (type != "text") {
      throw unsupported(part_path + ".type", fmt::format("content parts of type \"{}\" are not supported; only \"text\"", type));
    }
    if (i > 0) text += '\n';
    text += part.required_string("text");
  }
  return text;
}

Json read_messages(const FieldReader& f) {
  const Json* messages = f.array("messages");
  if (!messages) throw missing_field("messages");
  Json out = Json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const std::string path = fmt::format("messages[{}]", i);
    const Json& m = (*messages)[i];
    if (!m.is_object()) throw wrong_type(path, fmt::format("\"{}\" must be an object, got {}", path, describe_json(m)));
    const FieldReader mf(m, path);
    mf.required_string("role");
    Json msg = m;
    if (const Json* content = mf.get("content")) msg["content"] = message_text(*content, path + ".content");
    out.push_back(std::move(msg));
  }
  return out;
}

void read_chat_extras(const FieldReader& f, ChatRequest& c) {
  if (const Json* tools = f.array("tools")) c.template_extra["tools"] = *tools;
  if (const Json* kwargs = f.object("chat_template_kwargs")) {
    for (const auto& [k, v] : kwargs->items()) c.template_extra[k] = v;
  }
  c.add_generation_prompt = f.boolean("add_generation_prompt").value_or(true);
}

}  // namespace

CompletionRequest parse_completion_request(const Json& body) {
  const FieldReader f(body);
  RawGeneration r;
  read_common(f, r);
  r.max_tokens = f.integer("max_tokens");
  r.logprobs_n = f.integer("logprobs");
  r.suffix = f.string("suffix");
  CompletionRequest c;
  const Json* prompt = f.get("prompt");
  if (!prompt) throw missing_field("prompt");
  // A string, a list of token ids, or a one-element list of either.
  const Json* one = prompt;
  if (prompt->is_array() && !prompt->empty() && ((*prompt)[0].is_string() || (*prompt)[0].is_array())) {
    for (size_t i = 0; i < prompt->size(); ++i) {
      if (!(*prompt)[i].is_string() && !(*prompt)[i].is_array()) {
        throw wrong_type("prompt", fmt::format("\"prompt[{}]\" must be a string or an array of token ids, got {}", i, describe_json((*prompt)[i])));
      }
    }
    if (prompt->size() > 1) {
      throw unsupported("prompt", fmt::format("\"prompt\" must be a single prompt: a list of {} prompts is not supported", prompt->size()));
    }
    one = &(*prompt)[0];
  }
  if (one->is_string()) {
    c.prompt_text = one->get<std::string>();
  } else if (one->is_array()) {
    for (size_t i = 0; i < one->size(); ++i) {
      const std::optional<int64_t> id = json_integer((*one)[i]);
      if (!id) throw wrong_type("prompt", fmt::format("\"prompt\" token ids must be integers, got {} at index {}", describe_json((*one)[i]), i));
      c.prompt_ids.push_back(*id);
    }
  } else {
    throw wrong_type("prompt", fmt::format("\"prompt\" must be a string or an array of token ids, got {}", describe_json(*one)));
  }
  c.add_special_tokens = f.boolean("add_special_tokens").value_or(true);
  c.gen = finish_common(r, false);
  if ((c.prompt_text && c.prompt_text->empty()) || (!c.prompt_text && c.prompt_ids.empty())) {
    throw invalid_value("prompt", "\"prompt\" must not be empty");
  }
  return c;
}

ChatRequest parse_chat_request(const Json& body) {
  const FieldReader f(body);
  RawGeneration r;
  read_common(f, r);
  const std::optional<int64_t> max_tokens = f.integer("max_tokens");
  const std::optional<int64_t> max_completion_tokens = f.integer("max_completion_tokens");
  r.max_tokens = max_completion_tokens ? max_completion_tokens : max_tokens;
  if (max_completion_tokens) r.max_tokens_param = "max_completion_tokens";
  r.logprobs_flag = f.boolean("logprobs");
  r.top_logprobs = f.integer("top_logprobs");
  ChatRequest c;
  c.messages = read_messages(f);
  read_chat_extras(f, c);
  c.add_special_tokens = f.boolean("add_special_tokens").value_or(false);
  c.gen = finish_common(r, true);
  if (c.messages.empty()) throw invalid_value("messages", "\"messages\" must not be empty");
  return c;
}

TokenizeRequest parse_tokenize_request(const Json& body) {
  const FieldReader f(body);
  TokenizeRequest t;
  t.model = f.string("model");
  if (f.get("messages")) {
    ChatRequest c;
    c.messages = read_messages(f);
    read_chat_extras(f, c);
    t.add_special_tokens = f.boolean("add_special_tokens").value_or(false);
    if (c.messages.empty()) throw invalid_value("messages", "\"messages\" must not be empty");
    t.chat = std::move(c);
    return t;
  }
  t.prompt = f.string("prompt");
  if (!t.prompt) throw missing_field("prompt");
  t.add_special_tokens = f.boolean("add_special_tokens").value_or(true);
  return t;
}

DetokenizeRequest parse_detokenize_request(const Json& body) {
  const FieldReader f(body);
  DetokenizeRequest d;
  d.model = f.string("model");
  std::optional<std::vector<int64_t>> tokens = f.integers("tokens");
  if (!tokens) throw missing_field("tokens");
  d.tokens = std::move(*tokens);
  return d;
}

int64_t context_limit(const RequestLimits& limits) {
  if (limits.kv_capacity_tokens > 0 && limits.kv_capacity_tokens < limits.max_model_len) return limits.kv_capacity_tokens;
  return limits.max_model_len;
}

std::vector<int32_t> check_token_ids(const std::vector<int64_t>& ids, int64_t n_vocab, const std::string& param) {
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (int64_t id : ids) {
    if (id < 0 || id >= n_vocab) {
      throw invalid_value(param, fmt::format("\"{}\" has the token id {}, outside the vocabulary (0..{})", param, id, n_vocab - 1));
    }
    out.push_back(int32_t(id));
  }
  return out;
}

void fit_to_context(GenerationFields& gen, int64_t n_prompt, const RequestLimits& limits, const std::string& prompt_param) {
  const int64_t limit = context_limit(limits);
  const char* what = prompt_param == "messages" ? "messages" : "prompt";
  if (n_prompt >= limit) {
    throw context_length_exceeded(
        prompt_param, fmt::format("This model's maximum context length is {} tokens. However, your {} has {} tokens, which leaves "
                                  "no room for a completion. Please reduce the length of the {}.",
                                  limit, what, n_prompt, what));
  }
  if (gen.max_tokens && n_prompt + *gen.max_tokens > limit) {
    throw context_length_exceeded(
        gen.max_tokens_param, fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens ({} in the {}, "
                              "{} for the completion). Please reduce the length of the {} or the completion.",
                              limit, n_prompt + *gen.max_tokens, n_prompt, what, *gen.max_tokens, what));
  }
  gen.params.max_tokens = gen.max_tokens.value_or(limit - n_prompt);
  for (int32_t t : gen.params.stop_token_ids) {
    if (t >= limits.n_vocab) {
      throw invalid_value("stop_token_ids",
                          fmt::format("\"stop_token_ids\" has the token id {}, outside the vocabulary (0..{})", t, limits.n_vocab - 1));
    }
  }
  for (const auto& [t, bias] : gen.params.sampling.logit_bias) {
    if (t >= limits.n_vocab) {
      throw invalid_value("logit_bias", fmt::format("\"logit_bias\" has the token id {}, outside the vocabulary (0..{})", t, limits.n_vocab - 1));
    }
  }
}

}  // namespace moe::server
