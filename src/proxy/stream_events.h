#pragma once
// The client's event stream from P's and D's, one event at a time, without I/O. Every JSON
// event is sent with the proxy's id and created and without "kv_transfer_params"; events
// that are not JSON, errors ({"error": ...}) and [DONE] go as they are. D's chunks and a
// unified instance's, in the shape `moengine serve` writes them and without logprobs, are
// rewritten by splicing their text (chunk_splice.h); every other chunk is parsed and
// serialized again.
//
// P's stream is relayed up to its finish chunk (the one whose choice has a finish_reason).
// There P's "kv_transfer_params" decides: null, and P's stream is the whole answer, relayed
// to its end; a hand-off, and the finish chunk (unless it carries text, which goes without
// its finish_reason) and everything after it (the usage chunk, [DONE]) are dropped, and D's
// stream follows whole, its completions text_offset values moved past P's text.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/merge.h"

namespace moe::proxy {

// What the client gets for one event of an instance's stream.
struct Relay {
  std::optional<std::string> data;  // the event to send, if any
  bool text = false;                // it carries text (what TTFT and TPOT are timed by)
  // The chunk's "token_ids" (the instance was asked for them: return_token_ids), whether
  // or not the chunk is relayed; the field is dropped from what is relayed unless the
  // client asked for it too.
  std::vector<int32_t> token_ids;
};

class StreamRewriter {
 public:
  explicit StreamRewriter(Identity id, bool client_wants_token_ids = false)
      : id_(std::move(id)), keep_token_ids_(client_wants_token_ids) {}

  // P's events, in order. Throws ProtocolError for a finish chunk without
  // "kv_transfer_params" or with one that is neither null nor an object.
  Relay prefill_event(std::string_view data);
  // D's events, in order, after P handed off.
  Relay decode_event(std::string_view data);

  // The request runs whole at a unified instance: its stream is the answer, with no
  // "kv_transfer_params" to look for.
  void expect_whole_answer() { whole_ = true; }

  bool handed_off() const { return !handoff_.is_null(); }
  // P's hand-off (null before its finish chunk, or when the request ended at P).
  const Json& handoff() const { return handoff_; }
  // [DONE] has been relayed: the client's stream is complete.
  bool done() const { return done_; }

 private:
  // The event re-serialized as the proxy's (nullopt: not a JSON chunk, relay it as is).
  std::optional<Json> own_chunk(std::string_view data) const;
  // The common chunk made the proxy's without parsing it (chunk_splice.h); nullopt when it is
  // not one the splice handles, and the chunk is parsed.
  std::optional<Relay> spliced(std::string_view data) const;

  // Takes the first choice's token ids out of a chunk (leaving them when the client wants them).
  void take_token_ids(Json* choice, Relay& r) const;

  Identity id_;
  bool keep_token_ids_;
  Json handoff_;
  TextEnd p_text_;
  bool done_ = false;
  bool whole_ = false;
};

// A stream resumed elsewhere after its decode instance failed (resume.h) is a completions
// request of token ids; its events, already the proxy's (a StreamRewriter's output), become
// the client's continuation: chat deltas for a chat client, and usage counted from the
// client's prompt (`prompt_tokens`) with the `generated_before` tokens it had already got.
class ResumeConverter {
 public:
  ResumeConverter(Api client_api, int64_t prompt_tokens, int64_t generated_before)
      : api_(client_api), prompt_tokens_(prompt_tokens), generated_before_(generated_before) {}
  std::string convert(const std::string& event) const;

 private:
  Api api_;
  int64_t prompt_tokens_, generated_before_;
};

}  // namespace moe::proxy
