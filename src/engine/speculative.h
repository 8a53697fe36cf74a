#pragma once
// Speculative decoding's settings, as vLLM's speculative_config spells them, and the
// drafters that propose tokens for the engine to verify (docs/speculative.md).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/scheduler.h"

namespace moe {

struct SpeculativeConfig {
  enum class Method { kNone, kNgram, kMtp };
  Method method = Method::kNone;
  // Drafted tokens verified per decode step; 0 with kNone.
  int32_t num_speculative_tokens = 0;
  // ngram: the longest and shortest suffix of the tokens so far looked up in them.
  int32_t prompt_lookup_max = 5;
  int32_t prompt_lookup_min = 2;
  // Each request drafts as many tokens as its acceptance makes worth it (0 up to
  // num_speculative_tokens: engine/draft_length.h); false: always num_speculative_tokens.
  bool adaptive = true;
  bool enabled() const { return method != Method::kNone && num_speculative_tokens > 0; }
};

// Drafting with the model's MTP layer, whose KV the engine's cache then holds.
inline bool speculative_uses_mtp(const SpeculativeConfig& c) { return c.enabled() && c.method == SpeculativeConfig::Method::kMtp; }

const char* speculative_method_name(SpeculativeConfig::Method m);  // "none", "ngram", "mtp"

// A JSON object {"method": "ngram"|"mtp", "num_speculative_tokens": N, "prompt_lookup_max":
// M, "prompt_lookup_min": m, "adaptive": true|false}; "deepseek_mtp" is taken for "mtp", as
// vLLM does ("adaptive" is moengine's own). Throws
// moe::Error naming the field for an unknown key, a wrong type or a value out of range.
SpeculativeConfig parse_speculative_config(std::string_view json);
// The config as that JSON object (the inverse of parse_speculative_config).
std::string speculative_config_json(const SpeculativeConfig& c);

// Prompt lookup: the longest suffix of the tokens so far, prompt_lookup_max long down to
// prompt_lookup_min, that occurred before in them; the tokens that followed its latest
// earlier occurrence are the draft. No model and no state: the same tokens give the same
// draft on every instance.
class NgramDrafter : public DraftSource {
 public:
  NgramDrafter(int32_t min_n, int32_t max_n);
  std::vector<int32_t> propose(int64_t id, const std::vector<int32_t>& tokens, int32_t max_k) override;

 private:
  int32_t min_n_, max_n_;
};

// The model-free drafter a config names (null for kNone). kMtp needs the model's MTP layer,
// so the engine makes that one (engine/mtp_drafter.h); here it throws moe::Error.
std::unique_ptr<DraftSource> make_drafter(const SpeculativeConfig& c);

}  // namespace moe
