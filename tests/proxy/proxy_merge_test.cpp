// The P/D protocol's JSON without I/O: the client's body checked, the bodies sent to P and
// D, P's hand-off read, and P's and D's whole answers merged into the client's (text,
// logprobs with text_offset moved past P's text in UTF-8 bytes, identity, usage).
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "proxy/errors.h"
#include "proxy/merge.h"

namespace moe::proxy {
namespace {

const Identity kId{"cmpl-0123456789abcdef0123456789abcdef", 1700000000};
const Identity kChatId{"chatcmpl-0123456789abcdef0123456789abcdef", 1700000000};

Json j(const char* text) { return Json::parse(text); }

ApiError client_error(const std::string& body) {
  try {
    parse_client_body(body);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << body;
  return bad_gateway("");
}

TEST(ClientBody, MustBeAJsonObjectForOneChoice) {
  EXPECT_EQ(parse_client_body(R"({"prompt":"x","n":1})").dump(), R"({"prompt":"x","n":1})");
  EXPECT_EQ(client_error("{not json").status(), http::Status::bad_request);
  EXPECT_EQ(client_error("{not json").code(), "invalid_json");
  EXPECT_EQ(client_error("[1, 2]").code(), "invalid_json");
  const ApiError n = client_error(R"({"prompt":"x","n":2})");
  EXPECT_EQ(n.status(), http::Status::bad_request);
  EXPECT_EQ(error_body(n),
            R"({"error":{"message":"n > 1 is not supported behind the P/D proxy yet","type":"invalid_request_error","param":"n","code":"unsupported_value"}})");
}

TEST(ClientBody, StreamsOnlyForTrue) {
  EXPECT_TRUE(wants_stream(j(R"({"stream":true})")));
  EXPECT_FALSE(wants_stream(j(R"({"stream":false})")));
  EXPECT_FALSE(wants_stream(j(R"({"stream":"yes"})")));
  EXPECT_FALSE(wants_stream(j(R"({})")));
}

TEST(LegBodies, PrefillAsksForAHandOffAndKeepsTheRest) {
  const Json client = j(R"({"model":"m","prompt":"Hi","stream":true,"kv_transfer_params":{"do_remote_prefill":true},"echo":true})");
  EXPECT_EQ(prefill_body(client).dump(),
            R"({"model":"m","prompt":"Hi","stream":true,"kv_transfer_params":{"do_remote_decode":true},"echo":true})");
  EXPECT_EQ(prefill_body(j(R"({"prompt":"Hi"})")).dump(), R"({"prompt":"Hi","kv_transfer_params":{"do_remote_decode":true}})");
}

TEST(LegBodies, DecodeGetsTheHandOffWithoutWhatPAnswered) {
  const Json client = j(R"({"model":"m","prompt":"Hi","echo":true,"prompt_logprobs":1,"logprobs":2,"stream":false})");
  const Json handoff = j(R"({"remote_request_id":"r1","remote_block_ids":[3,4]})");
  EXPECT_EQ(decode_body(client, handoff).dump(),
            R"({"model":"m","prompt":"Hi","logprobs":2,"stream":false,"kv_transfer_params":{"remote_request_id":"r1","remote_block_ids":[3,4]}})");
}

TEST(Handoff, NullObjectOrAProtocolError) {
  EXPECT_TRUE(handoff_of(j(R"({"choices":[{"text":"a"}],"kv_transfer_params":null})")).is_null());
  EXPECT_EQ(handoff_of(j(R"({"choices":[{"text":"a"}],"kv_transfer_params":{"remote_request_id":"r"}})")).dump(),
            R"({"remote_request_id":"r"})");
  EXPECT_THROW(handoff_of(j(R"({"choices":[{"text":"a"}]})")), ProtocolError);
  EXPECT_THROW(handoff_of(j(R"({"choices":[{"text":"a"}],"kv_transfer_params":"x"})")), ProtocolError);
  EXPECT_THROW(handoff_of(j(R"({"choices":[],"kv_transfer_params":null})")), ProtocolError);
}

TEST(Answers, MustBeJsonObjects) {
  EXPECT_THROW(parse_answer("<html>"), ProtocolError);
  EXPECT_THROW(parse_answer("[]"), ProtocolError);
  EXPECT_EQ(parse_answer(R"({"a":1})").dump(), R"({"a":1})");
}

TEST(Answers, MadeOwnInPlace) {
  Json a = j(R"({"id":"cmpl-p","object":"text_completion","created":5,"choices":[],"kv_transfer_params":null})");
  make_own(a, kId);
  EXPECT_EQ(a.dump(), R"({"id":"cmpl-0123456789abcdef0123456789abcdef","object":"text_completion","created":1700000000,"choices":[]})");
}

TEST(Identity, PrefixAnd32HexDigits) {
  const std::regex completion("cmpl-[0-9a-f]{32}"), chat("chatcmpl-[0-9a-f]{32}");
  std::set<std::string> ids;
  for (int i = 0; i < 100; ++i) {
    const Identity id = new_identity(Api::kCompletion);
    EXPECT_TRUE(std::regex_match(id.id, completion)) << id.id;
    EXPECT_GT(id.created, 1600000000);
    ids.insert(id.id);
  }
  EXPECT_EQ(ids.size(), 100u);
  EXPECT_TRUE(std::regex_match(new_identity(Api::kChat).id, chat));
}

TEST(Merge, CompletionTextIsPsThenDsWithDsEndAndUsage) {
  const Json p = j(R"({"id":"cmpl-p","object":"text_completion","created":1,"model":"m",
    "choices":[{"index":0,"text":" A","logprobs":null,"finish_reason":"length","stop_reason":null}],
    "usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3},"kv_transfer_params":{"remote_request_id":"r"}})");
  const Json d = j(R"({"id":"cmpl-d","object":"text_completion","created":2,"model":"m",
    "choices":[{"index":0,"text":" B C","logprobs":null,"finish_reason":"stop","stop_reason":"."}],
    "usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5},"kv_transfer_params":null})");
  EXPECT_EQ(merge_answers(Api::kCompletion, p, d, kId).dump(),
            R"({"id":"cmpl-0123456789abcdef0123456789abcdef","object":"text_completion","created":1700000000,"model":"m",)"
            R"("choices":[{"index":0,"text":" A B C","logprobs":null,"finish_reason":"stop","stop_reason":"."}],)"
            R"("usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}})");
}

// P echoed the prompt: its text and logprobs start with the prompt's tokens, then its first
// token; D's offsets count from the start of D's text and move past P's, in UTF-8 bytes.
TEST(Merge, CompletionLogprobsJoinWithDsOffsetsShifted) {
  const Json p = j(R"({"choices":[{"index":0,"text":"Café A","logprobs":{
    "text_offset":[0,3,5],"token_logprobs":[null,-0.5,-0.25],"tokens":["Caf","é"," A"],
    "top_logprobs":[null,{"é":-0.5},{" A":-0.25}]},"finish_reason":"length"}],"kv_transfer_params":{}})");
  const Json d = j(R"({"choices":[{"index":0,"text":" B€","logprobs":{
    "text_offset":[0,2],"token_logprobs":[-1.0,-2.0],"tokens":[" B","€"],
    "top_logprobs":[{" B":-1.0},{"€":-2.0}]},"finish_reason":"stop"}]})");
  const Json m = merge_answers(Api::kCompletion, p, d, kId)["choices"][0];
  EXPECT_EQ(m["text"], "Café A B€");
  // "Café A" is 7 bytes: P's last token " A" starts at 5 and is 2 long.
  EXPECT_EQ(m["logprobs"].dump(),
            R"({"text_offset":[0,3,5,7,9],"token_logprobs":[null,-0.5,-0.25,-1.0,-2.0],"tokens":["Caf","é"," A"," B","€"],)"
            R"("top_logprobs":[null,{"é":-0.5},{" A":-0.25},{" B":-1.0},{"€":-2.0}]})");
}

TEST(Merge, LogprobsNullWhenEitherSideHasNone) {
  const Json with = j(R"({"choices":[{"text":"a","logprobs":{"text_offset":[0],"token_logprobs":[-1.0],"tokens":["a"],"top_logprobs":[null]}}]})");
  const Json without = j(R"({"choices":[{"text":"b","logprobs":null}]})");
  EXPECT_TRUE(merge_answers(Api::kCompletion, with, without, kId)["choices"][0]["logprobs"].is_null());
  EXPECT_TRUE(merge_answers(Api::kCompletion, without, with, kId)["choices"][0]["logprobs"].is_null());
}

TEST(Merge, ChatContentAndLogprobsContentJoin) {
  const Json p = j(R"({"id":"chatcmpl-p","object":"chat.completion","created":1,"model":"m",
    "choices":[{"index":0,"message":{"role":"assistant","content":"Hel"},
    "logprobs":{"content":[{"token":"Hel","logprob":-0.1,"bytes":[72,101,108],"top_logprobs":[]}]},"finish_reason":"length"}],
    "kv_transfer_params":{"remote_request_id":"r"}})");
  const Json d = j(R"({"id":"chatcmpl-d","object":"chat.completion","created":2,"model":"m",
    "choices":[{"index":0,"message":{"role":"assistant","content":"lo"},
    "logprobs":{"content":[{"token":"lo","logprob":-0.2,"bytes":[108,111],"top_logprobs":[]}]},"finish_reason":"stop","stop_reason":null}],
    "usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}})");
  EXPECT_EQ(merge_answers(Api::kChat, p, d, kChatId).dump(),
            R"({"id":"chatcmpl-0123456789abcdef0123456789abcdef","object":"chat.completion","created":1700000000,"model":"m",)"
            R"("choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"logprobs":{"content":[)"
            R"({"token":"Hel","logprob":-0.1,"bytes":[72,101,108],"top_logprobs":[]},)"
            R"({"token":"lo","logprob":-0.2,"bytes":[108,111],"top_logprobs":[]}]},"finish_reason":"stop","stop_reason":null}],)"
            R"("usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}})");
}

TEST(Merge, ChatNullContentCountsAsEmpty) {
  const Json p = j(R"({"choices":[{"message":{"role":"assistant","content":null},"logprobs":null}]})");
  const Json d = j(R"({"choices":[{"message":{"role":"assistant","content":"x"},"logprobs":null}]})");
  EXPECT_EQ(merge_answers(Api::kChat, p, d, kChatId)["choices"][0]["message"]["content"], "x");
}

TEST(Merge, DecodeWithoutChoicesIsAProtocolError) {
  const Json p = j(R"({"choices":[{"text":"a"}]})");
  EXPECT_THROW(merge_answers(Api::kCompletion, p, j(R"({"choices":[]})"), kId), ProtocolError);
  EXPECT_THROW(merge_answers(Api::kCompletion, p, j(R"({"error":{}})"), kId), ProtocolError);
}

TEST(TextEnd, AfterPsLastTokenElsePsTextInBytes) {
  TextEnd none;
  none.add(j(R"({"text":"né","logprobs":null})"));
  EXPECT_EQ(none.bytes(), 3);
  none.add(j(R"({"text":"e"})"));
  EXPECT_EQ(none.bytes(), 4);

  TextEnd chunks;  // a stream's chunks: the echoed prompt, then the first token, then the finish
  chunks.add(j(R"({"text":"Hi","logprobs":{"text_offset":[0],"tokens":["Hi"],"token_logprobs":[null],"top_logprobs":[null]}})"));
  EXPECT_EQ(chunks.bytes(), 2);
  chunks.add(j(R"({"text":" ü","logprobs":{"text_offset":[2],"tokens":[" ü"],"token_logprobs":[-1.0],"top_logprobs":[null]}})"));
  EXPECT_EQ(chunks.bytes(), 5);
  chunks.add(j(R"({"text":"","logprobs":null,"finish_reason":"length"})"));
  EXPECT_EQ(chunks.bytes(), 5);
}

TEST(TextOffsets, ShiftedWhereTheyAreNumbers) {
  Json lp = j(R"({"text_offset":[0,1,4],"tokens":["a","b","c"]})");
  shift_text_offsets(lp, 10);
  EXPECT_EQ(lp.dump(), R"({"text_offset":[10,11,14],"tokens":["a","b","c"]})");
  Json chat = j(R"({"content":[]})");
  shift_text_offsets(chat, 10);
  EXPECT_EQ(chat.dump(), R"({"content":[]})");
  Json null;
  shift_text_offsets(null, 10);
  EXPECT_TRUE(null.is_null());
}

TEST(ChoiceText, CompletionChatAndDelta) {
  EXPECT_EQ(choice_text(j(R"({"text":"a"})")), "a");
  EXPECT_EQ(choice_text(j(R"({"message":{"role":"assistant","content":"b"}})")), "b");
  EXPECT_EQ(choice_text(j(R"({"delta":{"content":"c"}})")), "c");
  EXPECT_EQ(choice_text(j(R"({"delta":{"role":"assistant"}})")), "");
  EXPECT_EQ(choice_text(j(R"({"delta":{}})")), "");
}

}  // namespace
}  // namespace moe::proxy
