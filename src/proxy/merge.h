#pragma once
// The prefill/decode protocol's JSON, without I/O: the bodies the proxy sends to a prefill
// instance (P) and a decode instance (D), and the one answer it builds from theirs for a
// client that does not stream (stream_events.h does the same for one that does).
//
//   to P: the client's body with "kv_transfer_params": {"do_remote_decode": true}.
//   from P: a normal answer plus top-level "kv_transfer_params": null when the request
//           ended at P (then P's answer is the whole answer), else the hand-off for D.
//   to D: the client's body with P's hand-off as "kv_transfer_params", without "echo" and
//         "prompt_logprobs" (P answered those).
//   from D: the continuation after P's first token, with the whole request's
//           finish_reason, stop_reason and usage.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/error.h"

namespace moe::proxy {

// Ordered, so that relayed answers keep the instances' key order.
using Json = nlohmann::ordered_json;

enum class Api { kCompletion, kChat };

// An instance answered outside the protocol (not JSON, no hand-off field, no choices); the
// message says what was wrong, for a 502 that names the instance.
class ProtocolError : public Error {
 public:
  using Error::Error;
};

// What makes the client's answer the proxy's own rather than an instance's.
struct Identity {
  std::string id;       // "cmpl-<32 hex>" or "chatcmpl-<32 hex>"
  int64_t created = 0;  // Unix seconds
};
Identity new_identity(Api api);

// The client's body as the proxy needs it: a JSON object asking for one choice. Throws
// ApiError (400) otherwise; every other check is left to the instances.
Json parse_client_body(std::string_view body);
bool wants_stream(const Json& client_body);

Json prefill_body(Json client_body);
Json decode_body(Json client_body, const Json& handoff);

// An instance's answer body; throws ProtocolError when it is not JSON.
Json parse_answer(std::string_view body);
// P's "kv_transfer_params": null when the request ended at P, else the hand-off object.
// Throws ProtocolError when it is missing (P is not a prefill instance) or malformed, or
// when the answer has no first choice.
Json handoff_of(const Json& p_answer);

// Sets the proxy's id and created, and drops "kv_transfer_params": what every answer and
// event the client gets goes through.
void make_own(Json& answer, const Identity& id);

// The whole answer from P's and D's: D's, with P's text (and logprobs) in front of D's.
// Throws ProtocolError when either has no first choice (the message says "its answer":
// the caller names the instance, which handoff_of has ruled out being P).
Json merge_answers(Api api, const Json& p_answer, Json d_answer, const Identity& id);

// Byte offset, in the client's whole text, where D's text starts. Completions' logprobs
// count text_offset from the start of the choice's text (echoed prompt included), and D
// counts from the start of its own: D's are shifted by this. Fed P's pieces of one choice in
// order (one whole choice, or the choice of each streamed chunk).
class TextEnd {
 public:
  void add(const Json& p_choice);
  int64_t bytes() const { return logprobs_end_ ? *logprobs_end_ : text_bytes_; }

 private:
  int64_t text_bytes_ = 0;
  std::optional<int64_t> logprobs_end_;  // after P's last token, when P sent logprobs
};

// Adds `base` to every entry of a completions logprobs object's "text_offset".
void shift_text_offsets(Json& logprobs, int64_t base);

// The member, or null when j is not an object or has no such member.
const Json* member(const Json& j, std::string_view key);
// A choice's new text: "text" (completions), else "message"/"delta" "content" (chat).
std::string choice_text(const Json& choice);

}  // namespace moe::proxy
