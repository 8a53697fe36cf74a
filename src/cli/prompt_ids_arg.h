#pragma once
// --prompt-ids, as generate and bench kv-accuracy take it: comma-separated token ids.
#include <cstdint>
#include <string>
#include <vector>

namespace moe::cli {

// The ids of `text`; throws moe::Error naming the first item that is not an integer in
// [0, n_vocab), or when there is none.
std::vector<int32_t> parse_prompt_ids(const std::string& text, int64_t n_vocab);

}  // namespace moe::cli
