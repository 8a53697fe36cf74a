#pragma once
// The pre-tokenizer: cuts normalized text into words that BPE encodes one at a time. It
// runs a sequence of steps, each re-splitting every piece the previous step produced, as a
// tokenizer.json "Sequence" does: regex Splits (the DeepSeek and Qwen2 patterns), Digits
// and ByteLevel (optionally GPT-2's own regex and a prefix space).
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace moe {

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// One step as plain data, so specs can be compared and written back out (GGUF export).
struct PreTokenizerStep {
  enum Kind { Split, ByteLevel, Digits } kind = Split;
  std::string regex;  // Split: PCRE2 pattern (a literal String pattern arrives quoted)
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  bool add_prefix_space = false;   // ByteLevel
  bool use_regex = false;          // ByteLevel: split with GPT-2's pattern first
  bool individual_digits = false;  // Digits: each digit a word of its own, else each run

  bool operator==(const PreTokenizerStep&) const = default;
};

// GPT-2's pattern, which ByteLevel applies when use_regex is set.
extern const char* const kGpt2Pattern;

class PreTokenizer {
 public:
  explicit PreTokenizer(std::vector<PreTokenizerStep> steps);
  const std::vector<PreTokenizerStep>& steps() const { return steps_; }

  // Appends the words of `text` (valid UTF-8) to `out`. Words are views into `text` or
  // into `owned`, which holds the few words a step had to rewrite (a prefix space).
  void split(std::string_view text, std::vector<std::string_view>& out, std::deque<std::string>& owned) const;

 private:
  void apply_split(const Regex& re, const PreTokenizerStep& step, std::string_view piece,
                   std::vector<std::string_view>& out) const;

  std::vector<PreTokenizerStep> steps_;
  std::vector<std::unique_ptr<Regex>> regexes_;  // per step; null where a step has none
};

// What llama.cpp makes of a GGUF tokenizer.ggml.pre value: its split rules, as steps, and
// whether words found whole in the vocabulary skip the merges (Llama 3's ignore_merges).
struct GgufPreTokenizer {
  std::string name;
  std::vector<PreTokenizerStep> steps;
  bool ignore_merges = false;
};

// The supported tokenizer.ggml.pre values, for messages: "deepseek-v3, deepseek-llm, ...".
std::string gguf_pre_tokenizer_names();
// Throws moe::Error naming `name` and the supported values; `source` (a file) leads the message.
const GgufPreTokenizer& gguf_pre_tokenizer(std::string_view name, std::string_view source = {});
std::vector<PreTokenizerStep> pre_tokenizer_for_gguf(std::string_view name);
// The GGUF name for a tokenizer.json pre-tokenizer, as llama.cpp's converter names it: its
// steps are those of the models' own files for that name, or llama.cpp's. "" when none matches.
std::string gguf_name_for_pre_tokenizer(const std::vector<PreTokenizerStep>& steps);

}  // namespace moe
