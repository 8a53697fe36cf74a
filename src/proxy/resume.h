#pragma once
// Continuing a stream elsewhere after its decode instance failed mid-way: the client has
// the text of some tokens, and the proxy their ids (the legs stream with
// "return_token_ids"). A new completions request of token ids, the prompt's and those,
// asks for the rest; with greedy decoding its tokens are the ones the failed instance
// would have produced. Its events are turned into the client's (ResumeConverter).
//
// Not resumed, so the client gets the error: answers with logprobs or echo (their offsets
// and lists cannot be joined from here). Resumed but not token-exact: sampled answers (the
// random stream starts over), and presence or frequency penalties (the tokens already
// generated count as prompt). Text an instance held back when it failed (an unfinished
// UTF-8 character, the start of a possible stop string) is not sent again.
#include <cstdint>
#include <optional>
#include <vector>

#include "proxy/merge.h"

namespace moe::proxy {

bool resumable(const Json& client_body);

// The completions body that continues `client_body` after `generated` tokens of
// `prompt_ids`; nullopt when its max_tokens are used up.
std::optional<Json> resume_body(const Json& client_body, const std::vector<int32_t>& prompt_ids,
                                const std::vector<int32_t>& generated);

}  // namespace moe::proxy
