#pragma once
// What a client asks the engine for, and what the engine hands back as the request runs.
// Plain data shared by the engine core, the async front end and the HTTP server.
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/sampling.h"

namespace moe {

struct GenerateParams {
  SamplingParams sampling;
  int64_t max_tokens = 16;
  // Text that ends the output; the stop string itself is not part of the text. Found
  // across token boundaries.
  std::vector<std::string> stop;
  // Token ids that end the output (the token is counted but adds no text).
  std::vector<int32_t> stop_token_ids;
  // Generate past the model's end-of-sequence / end-of-turn tokens.
  bool ignore_eos = false;
  // Control tokens (EOS, chat markers) add no text.
  bool skip_special_tokens = true;
  int32_t priority = 0;  // lower is more urgent; used by the priority policy
  // -1: off. k in [0, 20]: the logprob of every prompt token after the first, and the k most
  // likely tokens at its position. The prompt is then prefilled without prefix-cache hits.
  int32_t prompt_logprobs = -1;
  // The prefill half of a prefill/decode pair: the request ends after its first token
  // (FinishKind::kLength, unless that token stops it) with its prompt's KV blocks held
  // under a lease for a decode instance to pull (RequestOutput::kv), and text held back for
  // a possible stop string or an unfinished UTF-8 sequence is not flushed: the decode
  // instance, primed with the same token, continues it.
  bool remote_decode = false;
};

// Where a request's prompt KV lives in the block pool, for a transfer between instances.
struct KvBlocks {
  std::vector<int32_t> table;  // block ids, in position order
  int64_t n_tokens = 0;        // prompt positions the blocks hold
  // Leading positions already valid: a decode instance's prefix-cache hit, not pulled.
  int64_t n_cached = 0;
  // A prefill instance's hand-off, drafting with the MTP layer: the tokens it drafted after
  // the first one, for the decode instance's first step to verify.
  std::vector<int32_t> draft_tokens;
};

// Why a request ended, with the names OpenAI uses where one exists.
enum class FinishKind { kNone, kStop, kLength, kAbort, kError };
const char* finish_kind_name(FinishKind k);  // "stop", "length", "abort", "error"; "" for kNone

// Everything that happened to one request since its previous RequestOutput. Sent after
// each engine step that produced tokens for it, and exactly once with finished = true.
struct RequestOutput {
  int64_t id = 0;
  std::vector<TokenOutput> tokens;  // new tokens, in order (usually one)
  std::string text;                 // new text: whole UTF-8, stop strings held back
  bool finished = false;
  FinishKind finish = FinishKind::kNone;
  // The stop string or stop token id that ended it: "" / -1 when none (EOS, length).
  std::string stop_string;
  int32_t stop_token = -1;
  std::string error;                // with FinishKind::kError: why
  int64_t n_prompt_tokens = 0;
  int64_t n_output_tokens = 0;      // generated so far, including this output's
  int64_t n_cached_tokens = 0;      // prompt tokens served from the prefix cache
  // Speculative decoding, in the final output: drafted tokens verified for the request and
  // how many of them were accepted.
  int64_t n_draft_tokens = 0;
  int64_t n_accepted_tokens = 0;
  // With prompt_logprobs, in the request's first output only: one entry per prompt token
  // from the second on (the first has nothing to be predicted from).
  std::vector<TokenOutput> prompt_logprobs;
  // On a prefill instance, in the final output of a remote_decode request that handed off:
  // the prompt's blocks, held under a lease named by this output's id until released or
  // expired. On a decode instance, in the first output of a request added with its KV to
  // come from elsewhere: the blocks to fill (from n_cached on), then report kv_loaded.
  std::optional<KvBlocks> kv;
};

// Called on the engine thread: it must be quick and must not call into the engine.
using OutputSink = std::function<void(RequestOutput&&)>;

using Clock = std::chrono::steady_clock;

// A request the engine refuses before queueing it (the server answers 400). param names the
// offending field as the OpenAI API spells it ("messages", "max_tokens", ...), or is empty.
class RequestError : public Error {
 public:
  RequestError(const std::string& message, std::string param) : Error(message), param_(std::move(param)) {}
  const std::string& param() const { return param_; }

 private:
  std::string param_;
};

}  // namespace moe
