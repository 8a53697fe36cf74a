#pragma once
// The client's event stream from P's and D's, one event at a time, without I/O. Every JSON
// event is sent re-serialized with the proxy's id and created and without
// "kv_transfer_params"; events that are not JSON, errors ({"error": ...}) and [DONE] go
// as they are.
//
// P's stream is relayed up to its finish chunk (the one whose choice has a finish_reason).
// There P's "kv_transfer_params" decides: null, and P's stream is the whole answer, relayed
// to its end; a hand-off, and the finish chunk (unless it carries text, which goes without
// its finish_reason) and everything after it (the usage chunk, [DONE]) are dropped, and D's
// stream follows whole, its completions text_offset values moved past P's text.
#include <optional>
#include <string>
#include <string_view>

#include "proxy/merge.h"

namespace moe::proxy {

// What the client gets for one event of an instance's stream.
struct Relay {
  std::optional<std::string> data;  // the event to send, if any
  bool text = false;                // it carries text (what TTFT and TPOT are timed by)
};

class StreamRewriter {
 public:
  explicit StreamRewriter(Identity id) : id_(std::move(id)) {}

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

  Identity id_;
  Json handoff_;
  TextEnd p_text_;
  bool done_ = false;
  bool whole_ = false;
};

}  // namespace moe::proxy
