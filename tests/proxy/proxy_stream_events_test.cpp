// The client's event stream built from P's and D's, event by event: P relayed up to its
// finish chunk, which either ends the request at P (kv_transfer_params null: relayed to the
// end) or hands off (it, P's usage chunk and P's [DONE] dropped); D's events relayed whole
// with completions text_offset moved past P's text; every JSON event the proxy's own.
#include <gtest/gtest.h>

#include "proxy/stream_events.h"

namespace moe::proxy {
namespace {

const Identity kId{"cmpl-ffffffffffffffffffffffffffffffff", 1700000000};

// A chunk as an instance sends it: id "x", created 1, then `rest`.
std::string from(const std::string& rest) { return R"({"id":"x","object":"text_completion","created":1,"model":"m",)" + rest; }
// The same chunk as the client gets it.
std::string as_own(const std::string& rest) {
  return R"({"id":"cmpl-ffffffffffffffffffffffffffffffff","object":"text_completion","created":1700000000,"model":"m",)" + rest;
}

std::string text_chunk(const std::string& text) {
  return R"("choices":[{"index":0,"text":")" + text + R"(","logprobs":null,"finish_reason":null}]})";
}
const std::string kFinish = R"("choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"length","stop_reason":null}])";
const std::string kUsage = R"("choices":[],"usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3}})";

TEST(PrefillStream, EndsAtPWhenTheHandOffIsNull) {
  StreamRewriter s(kId);
  const Relay a = s.prefill_event(from(text_chunk(" A")));
  EXPECT_EQ(a.data, as_own(text_chunk(" A")));
  EXPECT_TRUE(a.text);
  const Relay finish = s.prefill_event(from(kFinish + R"(,"kv_transfer_params":null})"));
  EXPECT_EQ(finish.data, as_own(kFinish + "}"));
  EXPECT_FALSE(finish.text);
  EXPECT_FALSE(s.handed_off());
  EXPECT_EQ(s.prefill_event(from(kUsage)).data, as_own(kUsage));
  EXPECT_FALSE(s.done());
  EXPECT_EQ(s.prefill_event("[DONE]").data, "[DONE]");
  EXPECT_TRUE(s.done());
}

TEST(PrefillStream, HandOffDropsTheFinishChunkUsageAndDone) {
  StreamRewriter s(kId);
  const std::string role = R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]})";
  const Relay r = s.prefill_event(from(role));
  EXPECT_EQ(r.data, as_own(role));
  EXPECT_FALSE(r.text);
  EXPECT_TRUE(s.prefill_event(from(text_chunk(" A"))).data);
  const Relay finish = s.prefill_event(from(kFinish + R"(,"kv_transfer_params":{"remote_request_id":"r1"}})"));
  EXPECT_FALSE(finish.data);
  EXPECT_TRUE(s.handed_off());
  EXPECT_EQ(s.handoff().dump(), R"({"remote_request_id":"r1"})");
  EXPECT_FALSE(s.prefill_event(from(kUsage)).data);
  EXPECT_FALSE(s.prefill_event("[DONE]").data);
  EXPECT_FALSE(s.done());
}

TEST(PrefillStream, AHandOffChunkWithTextKeepsTheTextWithoutTheFinish) {
  StreamRewriter s(kId);
  const Relay r = s.prefill_event(
      from(R"("choices":[{"index":0,"text":" A","logprobs":null,"finish_reason":"length","stop_reason":null}],"kv_transfer_params":{"remote_request_id":"r"}})"));
  EXPECT_EQ(r.data, as_own(R"("choices":[{"index":0,"text":" A","logprobs":null,"finish_reason":null}]})"));
  EXPECT_TRUE(r.text);
  EXPECT_TRUE(s.handed_off());
}

TEST(PrefillStream, AFinishChunkWithoutHandOffFieldIsAProtocolError) {
  StreamRewriter s(kId);
  EXPECT_THROW(s.prefill_event(from(kFinish + "}")), ProtocolError);
  StreamRewriter t(kId);
  EXPECT_THROW(t.prefill_event(from(kFinish + R"(,"kv_transfer_params":[1]})")), ProtocolError);
}

TEST(PrefillStream, ErrorsAndNonJsonGoAsTheyAre) {
  StreamRewriter s(kId);
  const std::string error = R"({"error":{"message":"engine failed","type":"server_error","param":null,"code":"internal_error"}})";
  EXPECT_EQ(s.prefill_event(error).data, error);
  EXPECT_EQ(s.prefill_event("not json").data, "not json");
  EXPECT_EQ(s.prefill_event("[DONE]").data, "[DONE]");
  EXPECT_TRUE(s.done());
}

TEST(DecodeStream, RelayedWholeAsTheProxysOwn) {
  StreamRewriter s(kId);
  s.prefill_event(from(text_chunk(" A")));
  s.prefill_event(from(kFinish + R"(,"kv_transfer_params":{"remote_request_id":"r"}})"));
  const Relay b = s.decode_event(from(text_chunk(" B")));
  EXPECT_EQ(b.data, as_own(text_chunk(" B")));
  EXPECT_TRUE(b.text);
  const Relay finish = s.decode_event(from(kFinish + R"(,"kv_transfer_params":null})"));
  EXPECT_EQ(finish.data, as_own(kFinish + "}"));
  EXPECT_FALSE(finish.text);
  EXPECT_EQ(s.decode_event(from(kUsage)).data, as_own(kUsage));
  const std::string error = R"({"error":{"message":"x"}})";
  EXPECT_EQ(s.decode_event(error).data, error);
  EXPECT_FALSE(s.done());
  EXPECT_EQ(s.decode_event("[DONE]").data, "[DONE]");
  EXPECT_TRUE(s.done());
}

std::string lp_chunk(const std::string& text, int offset, const std::string& token) {
  return R"("choices":[{"index":0,"text":")" + text + R"(","logprobs":{"text_offset":[)" + std::to_string(offset) +
         R"(],"token_logprobs":[-1.0],"tokens":[")" + token + R"("],"top_logprobs":[null]},"finish_reason":null}]})";
}

// P echoed "Hé" (3 bytes) and sent " A" at 3: D's offsets count from 0 and move to 5 on.
TEST(DecodeStream, TextOffsetsMovePastPsTextInBytes) {
  StreamRewriter s(kId);
  EXPECT_EQ(s.prefill_event(from(lp_chunk("Hé", 0, "Hé"))).data, as_own(lp_chunk("Hé", 0, "Hé")));
  EXPECT_EQ(s.prefill_event(from(lp_chunk(" A", 3, " A"))).data, as_own(lp_chunk(" A", 3, " A")));
  s.prefill_event(from(kFinish + R"(,"kv_transfer_params":{"remote_request_id":"r"}})"));
  EXPECT_EQ(s.decode_event(from(lp_chunk(" B", 0, " B"))).data, as_own(lp_chunk(" B", 5, " B")));
  EXPECT_EQ(s.decode_event(from(lp_chunk(" C", 2, " C"))).data, as_own(lp_chunk(" C", 7, " C")));
}

TEST(DecodeStream, WithoutLogprobsTheBaseIsPsTextAndNothingShifts) {
  StreamRewriter s(kId);
  s.prefill_event(from(text_chunk("ü")));
  s.prefill_event(from(kFinish + R"(,"kv_transfer_params":{"remote_request_id":"r"}})"));
  EXPECT_EQ(s.decode_event(from(text_chunk(" B"))).data, as_own(text_chunk(" B")));
}

}  // namespace
}  // namespace moe::proxy
