#pragma once
// The prompts a benchmark sends. The client has no tokenizer of the served model, so
// lengths in tokens are exact only where it sends token ids; elsewhere they are counted by
// a TokenCounter (a real tokenizer when the caller has one, else an estimate) and the
// server's usage.prompt_tokens is what the report uses.
#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moe::loadgen {

struct SampleRequest {
  std::string prompt_text;          // sent when prompt_ids is empty
  std::vector<int32_t> prompt_ids;  // sent as the prompt when set (/v1/completions only)
  int64_t prompt_len = 0;           // expected prompt tokens
  int64_t output_len = 0;           // max_tokens of the request
};

using TokenCounter = std::function<int64_t(std::string_view)>;

// About one token per 4 bytes of English text (at least 1): what BPE vocabularies of
// 30k-150k tokens give on prose.
int64_t estimate_tokens(std::string_view text);

struct RandomDatasetOptions {
  size_t num_prompts = 0;
  int64_t input_len = 0, output_len = 0;
  // Each length is drawn uniformly from [len * (1 - r), len * (1 + r)]; 0 keeps it fixed.
  double range_ratio = 0;
  // true: prompts are random token ids in [0, vocab_size). false: prompts are input_len
  // common English words, each with a leading space (" the", " time", ...), which
  // byte-level BPE vocabularies of real models encode as one token each.
  bool token_ids = true;
  int64_t vocab_size = 256;
  uint64_t seed = 0;
};
std::vector<SampleRequest> random_dataset(const RandomDatasetOptions& o);

// A ShareGPT file is a JSON array of entries {"conversations": [{"from": "human",
// "value": "..."}, {"from": "gpt", "value": "..."}, ...], ...}; "conversation" is accepted
// for "conversations" and other keys are ignored. From each entry the prompt is the first
// turn from "human" (or "user") and the expected output is the next turn from anyone else
// but "human", "user" or "system". Entries without such a pair are skipped; so are those
// whose prompt is under 4 tokens or over 1024, whose answer is under 4 tokens (unless
// output_len is fixed), or whose prompt and output together exceed 2048 tokens (vLLM's
// filters).
struct ShareGptOptions {
  size_t num_prompts = 0;
  std::optional<int64_t> output_len;  // overrides the answer's length when set
  uint64_t seed = 0;                  // order of the shuffled conversations
  TokenCounter count_tokens = estimate_tokens;
};

struct ShareGptDataset {
  std::vector<SampleRequest> requests;
  size_t usable = 0;  // conversations that passed the filters; fewer than requested repeat
};

// `source` names the data in error messages (the file's path).
ShareGptDataset sharegpt_dataset(const nlohmann::json& data, const std::string& source, const ShareGptOptions& o);
ShareGptDataset load_sharegpt(const std::string& path, const ShareGptOptions& o);

}  // namespace moe::loadgen
