#pragma once
// An instance's stream chunk made the proxy's without a JSON parse, for the relay's common
// case: a chunk that starts {"id":"...","object":"...","created":N, (how `moengine serve`
// writes them), carries no "kv_transfer_params", no "error" and no logprobs. Its id and
// created are replaced and its first choice's "token_ids" read (and cut out unless kept)
// by splicing the text. Keys are matched with their quotes, which JSON escapes inside
// strings, so text that merely contains such a key cannot be mistaken for one.
//
// The result equals parsing the chunk, making it the proxy's and serializing it again
// (tests/proxy/proxy_chunk_splice_test.cpp), at a fraction of the cost.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moe::proxy {

struct SplicedChunk {
  std::string data;
  bool text = false;  // the choice's text (or delta content) is not empty
  std::vector<int32_t> token_ids;
};

// nullopt when the chunk is not one the splice handles.
std::optional<SplicedChunk> splice_chunk(std::string_view chunk, std::string_view id, int64_t created, bool keep_token_ids);

}  // namespace moe::proxy
