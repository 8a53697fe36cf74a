#pragma once
// Comma-separated token ids on the command line: --prompt-ids (generate, bench
// kv-accuracy) and tokenize's --decode.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moe::cli {

// The ids of `text`; throws moe::Error naming `flag` and the first item that is not an
// integer (or, given n_vocab, not in [0, n_vocab)), or when there is none.
std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& flag,
                                     std::optional<int64_t> n_vocab = std::nullopt);

}  // namespace moe::cli
