#include "loadgen/dataset.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "core/error.h"

namespace moe::loadgen {
namespace {

// Frequent English words; with their leading space each is a single token in the GPT-2,
// Llama-3, DeepSeek and Qwen vocabularies.
constexpr std::string_view kWords[] = {
    "the",   "of",    "and",   "to",    "in",    "is",    "that",  "for",   "it",    "as",    "was",   "with",
    "be",    "by",    "on",    "not",   "he",    "this",  "are",   "or",    "his",   "from",  "at",    "which",
    "but",   "have",  "an",   "had",   "they",  "you",   "were",  "their", "one",   "all",   "we",    "can",
    "her",   "has",   "there", "been",  "if",    "more",  "when",  "will",  "would", "who",   "so",    "no",
    "she",   "other", "its",   "may",   "these", "what",  "them",  "than",  "some",  "him",   "time",  "into",
    "only",  "do",    "could", "new",   "about", "two",   "first", "then",  "most",  "over",  "also",  "made",
    "after", "many",  "our",   "did",   "any",   "such",  "must",  "way",   "year",  "day",   "work",  "part",
    "long",  "world", "life",  "water", "place", "house", "light", "hand",  "small", "city",  "road",  "music"};

int64_t draw_length(std::mt19937_64& rng, int64_t len, double ratio) {
  if (ratio == 0) return len;
  const auto lo = std::max<int64_t>(1, int64_t(std::floor(double(len) * (1 - ratio))));
  const auto hi = std::max<int64_t>(lo, int64_t(std::ceil(double(len) * (1 + ratio))));
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

bool is_prompt_role(const std::string& from) { return from == "human" || from == "user"; }
bool is_answer_role(const std::string& from) { return !is_prompt_role(from) && from != "system"; }

struct Pair {
  const std::string* prompt = nullptr;
  const std::string* answer = nullptr;
};

// The first human turn and the answer after it; null members when the entry has none.
// Throws for entries of the wrong shape.
Pair first_pair(const nlohmann::json& entry, size_t index, const std::string& source) {
  if (!entry.is_object()) fail("ShareGPT file '{}': entry {} is a JSON {}, not an object", source, index, entry.type_name());
  const char* key = entry.contains("conversations") ? "conversations" : "conversation";
  const auto it = entry.find(key);
  if (it == entry.end() || it->is_null()) return {};
  if (!it->is_array())
    fail("ShareGPT file '{}': entry {}: '{}' must be an array of turns, not a JSON {}", source, index, key, it->type_name());
  Pair pair;
  for (size_t t = 0; t < it->size(); ++t) {
    const nlohmann::json& turn = (*it)[t];
    const auto from = turn.is_object() ? turn.find("from") : turn.end();
    const auto value = turn.is_object() ? turn.find("value") : turn.end();
    if (!turn.is_object() || from == turn.end() || !from->is_string() || value == turn.end() || !value->is_string())
      fail("ShareGPT file '{}': entry {}, turn {}: expected an object with string fields 'from' and 'value'", source,
           index, t);
    const std::string& role = from->get_ref<const std::string&>();
    if (!pair.prompt) {
      if (is_prompt_role(role)) pair.prompt = &value->get_ref<const std::string&>();
    } else if (is_answer_role(role)) {
      pair.answer = &value->get_ref<const std::string&>();
      return pair;
    }
  }
  return {};
}

}  // namespace

int64_t estimate_tokens(std::string_view text) { return std::max<int64_t>(1, int64_t((text.size() + 3) / 4)); }

std::vector<SampleRequest> random_dataset(const RandomDatasetOptions& o) {
  if (o.input_len < 1 || o.output_len < 1) fail("random dataset: --input-len and --output-len must be at least 1");
  if (!(o.range_ratio >= 0 && o.range_ratio < 1)) fail("random dataset: --random-range-ratio must be in [0, 1)");
  if (o.token_ids && o.vocab_size < 1) fail("random dataset: --vocab-size must be at least 1");
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> token(0, int32_t(std::min<int64_t>(o.vocab_size, INT32_MAX) - 1));
  std::uniform_int_distribution<size_t> word(0, std::size(kWords) - 1);
  std::vector<SampleRequest> out(o.num_prompts);
  for (SampleRequest& r : out) {
    r.prompt_len = draw_length(rng, o.input_len, o.range_ratio);
    r.output_len = draw_length(rng, o.output_len, o.range_ratio);
    if (o.token_ids) {
      r.prompt_ids.resize(size_t(r.prompt_len));
      for (int32_t& id : r.prompt_ids) id = token(rng);
    } else {
      for (int64_t i = 0; i < r.prompt_len; ++i) {
        r.prompt_text.push_back(' ');
        r.prompt_text.append(kWords[word(rng)]);
      }
    }
  }
  return out;
}

ShareGptDataset sharegpt_dataset(const nlohmann::json& data, const std::string& source, const ShareGptOptions& o) {
  constexpr int64_t kMinLen = 4, kMaxPrompt = 1024, kMaxTotal = 2048;
  if (!data.is_array())
    fail("ShareGPT file '{}': expected a JSON array of conversations at the top level, found a JSON {}", source,
         data.type_name());
  if (o.output_len && *o.output_len < 1) fail("--output-len must be at least 1");
  std::vector<SampleRequest> usable;
  for (size_t i = 0; i < data.size(); ++i) {
    const Pair pair = first_pair(data[i], i, source);
    if (!pair.prompt) continue;
    SampleRequest r;
    r.prompt_text = *pair.prompt;
    r.prompt_len = o.count_tokens(r.prompt_text);
    r.output_len = o.output_len ? *o.output_len : o.count_tokens(*pair.answer);
    if (r.prompt_len < kMinLen || r.prompt_len > kMaxPrompt || r.prompt_len + r.output_len > kMaxTotal) continue;
    if (!o.output_len && r.output_len < kMinLen) continue;
    usable.push_back(std::move(r));
  }
  if (usable.empty())
    fail("ShareGPT file '{}' has no usable conversation among its {} entries: each needs a 'human' turn followed by "
         "a 'gpt' turn, a prompt of {}..{} tokens, an answer of at least {} and at most {} tokens in all",
         source, data.size(), kMinLen, kMaxPrompt, kMinLen, kMaxTotal);
  std::shuffle(usable.begin(), usable.end(), std::mt19937_64(o.seed));
  ShareGptDataset out;
  out.usable = usable.size();
  out.requests.reserve(o.num_prompts);
  for (size_t i = 0; i < o.num_prompts; ++i) out.requests.push_back(usable[i % usable.size()]);
  return out;
}

ShareGptDataset load_sharegpt(const std::string& path, const ShareGptOptions& o) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read ShareGPT file '{}': {}", path, std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  nlohmann::json data;
  try {
    data = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    fail("ShareGPT file '{}' is not valid JSON: {}", path, e.what());
  }
  return sharegpt_dataset(data, path, o);
}

}  // namespace moe::loadgen
