#include "engine/speculative.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace moe {

const char* speculative_method_name(SpeculativeConfig::Method m) {
  switch (m) {
    case SpeculativeConfig::Method::kNgram: return "ngram";
    case SpeculativeConfig::Method::kMtp: return "mtp";
    case SpeculativeConfig::Method::kNone: break;
  }
  return "none";
}

namespace {

int32_t int_field(const nlohmann::json& o, const char* name, int32_t lo, int32_t hi, int32_t fallback) {
  const auto it = o.find(name);
  if (it == o.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) fail("speculative config: {} must be an integer, got {}", name, it->dump());
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) fail("speculative config: {} must be in [{}, {}], got {}", name, lo, hi, v);
  return int32_t(v);
}

}  // namespace

SpeculativeConfig parse_speculative_config(std::string_view text) {
  const nlohmann::json o = nlohmann::json::parse(text, nullptr, false);
  if (o.is_discarded() || !o.is_object()) fail("speculative config: not a JSON object: {}", text);
  for (const auto& [key, value] : o.items()) {
    if (key != "method" && key != "num_speculative_tokens" && key != "prompt_lookup_max" && key != "prompt_lookup_min" &&
        key != "adaptive")
      fail("speculative config: unknown field '{}' (known: method, num_speculative_tokens, prompt_lookup_max, prompt_lookup_min, adaptive)", key);
  }
  SpeculativeConfig c;
  const auto m = o.find("method");
  if (m == o.end() || !m->is_string()) fail("speculative config: method must be \"ngram\" or \"mtp\"");
  const std::string method = m->get<std::string>();
  if (method == "ngram") {
    c.method = SpeculativeConfig::Method::kNgram;
  } else if (method == "mtp" || method == "deepseek_mtp") {
    c.method = SpeculativeConfig::Method::kMtp;
  } else {
    fail("speculative config: method must be \"ngram\" or \"mtp\", got \"{}\"", method);
  }
  if (!o.contains("num_speculative_tokens")) fail("speculative config: num_speculative_tokens is required");
  c.num_speculative_tokens = int_field(o, "num_speculative_tokens", 1, 16, 0);
  c.prompt_lookup_max = int_field(o, "prompt_lookup_max", 1, 64, c.prompt_lookup_max);
  c.prompt_lookup_min = int_field(o, "prompt_lookup_min", 1, 64, std::min(c.prompt_lookup_min, c.prompt_lookup_max));
  if (c.prompt_lookup_min > c.prompt_lookup_max)
    fail("speculative config: prompt_lookup_min ({}) exceeds prompt_lookup_max ({})", c.prompt_lookup_min, c.prompt_lookup_max);
  if (const auto a = o.find("adaptive"); a != o.end()) {
    if (!a->is_boolean()) fail("speculative config: adaptive must be true or false");
    c.adaptive = a->get<bool>();
  }
  return c;
}

std::string speculative_config_json(const SpeculativeConfig& c) {
  nlohmann::json o = {{"method", speculative_method_name(c.method)}, {"num_speculative_tokens", c.num_speculative_tokens}};
  if (c.method == SpeculativeConfig::Method::kNgram) {
    o["prompt_lookup_max"] = c.prompt_lookup_max;
    o["prompt_lookup_min"] = c.prompt_lookup_min;
  }
  if (!c.adaptive) o["adaptive"] = false;
  return o.dump();
}

NgramDrafter::NgramDrafter(int32_t min_n, int32_t max_n) : min_n_(min_n), max_n_(max_n) {
  if (min_n < 1 || max_n < min_n) fail("NgramDrafter: need 1 <= min_n <= max_n, got {} and {}", min_n, max_n);
}

std::vector<int32_t> NgramDrafter::propose(int64_t, const std::vector<int32_t>& tokens, int32_t max_k) {
  const int64_t len = int64_t(tokens.size());
  for (int64_t n = std::min<int64_t>(max_n_, len - 1); n >= min_n_; --n) {
    const int32_t* suffix = tokens.data() + (len - n);
    // Latest occurrence first: the nearest context is the likeliest to repeat.
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (!std::equal(suffix, suffix + n, tokens.data() + start)) continue;
      const int64_t from = start + n;
      const int64_t to = std::min(len, from + max_k);
      return std::vector<int32_t>(tokens.begin() + from, tokens.begin() + to);
    }
  }
  return {};
}

std::unique_ptr<DraftSource> make_drafter(const SpeculativeConfig& c) {
  switch (c.method) {
    case SpeculativeConfig::Method::kNone: return nullptr;
    case SpeculativeConfig::Method::kNgram: return std::make_unique<NgramDrafter>(c.prompt_lookup_min, c.prompt_lookup_max);
    case SpeculativeConfig::Method::kMtp: break;
  }
  fail("speculative config: method mtp drafts with the model's MTP layer, which only the engine has (MtpDrafter)");
}

}  // namespace moe
