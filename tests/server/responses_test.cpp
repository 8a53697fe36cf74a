// Response bodies and SSE chunks, byte for byte as OpenAI sends them.
#include <gtest/gtest.h>

#include <regex>

#include "model/gguf.h"
#include "server/responses.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/synthetic_vocab.h"

namespace moe::server {
namespace {

class Responses : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    GgufWriter w;
    w.set_string("general.architecture", "deepseek2");
    write_gguf_vocab(w, make_synthetic_vocab(512, VocabFlavor::Deepseek));
    const std::vector<uint8_t> bytes = w.to_bytes();
    const GgufFile f("vocab.gguf", bytes.data(), bytes.size());
    tok_ = new Tokenizer(tokenizer_spec_from_gguf(f));
  }
  static void TearDownTestSuite() { delete tok_; }

  static ResponseMeta meta(Api api, bool logprobs = false, int32_t top = 0, bool usage = false) {
    ResponseMeta m;
    m.api = api;
    m.id = api == Api::kChat ? "chatcmpl-x" : "cmpl-x";
    m.created = 123;
    m.model = "m";
    m.logprobs = logprobs;
    m.top_logprobs = top;
    m.include_usage = usage;
    return m;
  }
  static RequestOutput output(const std::string& text, std::vector<TokenOutput> tokens = {}) {
    RequestOutput o;
    o.text = text;
    o.tokens = std::move(tokens);
    o.n_prompt_tokens = 5;
    o.n_output_tokens = 3;
    o.n_cached_tokens = 2;
    return o;
  }
  static RequestOutput last(const std::string& text, FinishKind kind) {
    RequestOutput o = output(text);
    o.finished = true;
    o.finish = kind;
    return o;
  }
  static std::string piece(int32_t id) { return utf8_sanitize(tok_->token_bytes(id)); }

  static Tokenizer* tok_;
};
Tokenizer* Responses::tok_ = nullptr;

const std::string kChatHead = R"({"id":"chatcmpl-x","object":"chat.completion.chunk","created":123,"model":"m","choices":[)";
const std::string kCompletionHead = R"({"id":"cmpl-x","object":"text_completion","created":123,"model":"m","choices":[)";

TEST_F(Responses, IdsHaveTheApiPrefixAndRandomHex) {
  const std::string a = new_response_id(Api::kCompletion), b = new_response_id(Api::kCompletion);
  EXPECT_TRUE(std::regex_match(a, std::regex("cmpl-[0-9a-f]{32}"))) << a;
  EXPECT_TRUE(std::regex_match(new_response_id(Api::kChat), std::regex("chatcmpl-[0-9a-f]{32}")));
  EXPECT_NE(a, b);
}

TEST_F(Responses, ChatStreamStartsWithTheRoleAndEndsWithFinishAndDone) {
  StreamEncoder enc(meta(Api::kChat), *tok_);
  EXPECT_EQ(enc.start(), std::vector<std::string>{
                             kChatHead + R"({"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]})"});
  EXPECT_EQ(enc.encode(0, output("Hel")),
            std::vector<std::string>{kChatHead + R"({"index":0,"delta":{"content":"Hel"},"logprobs":null,"finish_reason":null}]})"});
  // A token whose text is held back (half a UTF-8 character, a possible stop string) sends nothing.
  EXPECT_TRUE(enc.encode(0, output("", {{7, 0.0f, {}}})).empty());
  RequestOutput end = last("lo", FinishKind::kStop);
  end.stop_string = "END";
  EXPECT_EQ(enc.encode(0, end), (std::vector<std::string>{
                                 kChatHead + R"({"index":0,"delta":{"content":"lo"},"logprobs":null,"finish_reason":null}]})",
                                 kChatHead + R"({"index":0,"delta":{},"logprobs":null,"finish_reason":"stop","stop_reason":"END"}]})",
                                 "[DONE]"}));
}

TEST_F(Responses, CompletionStreamWithUsage) {
  StreamEncoder enc(meta(Api::kCompletion, false, 0, true), *tok_);
  EXPECT_TRUE(enc.start().empty());
  EXPECT_EQ(enc.encode(0, output("ab")),
            std::vector<std::string>{kCompletionHead + R"({"index":0,"text":"ab","logprobs":null,"finish_reason":null}],"usage":null})"});
  RequestOutput end = last("", FinishKind::kLength);
  EXPECT_EQ(enc.encode(0, end),
            (std::vector<std::string>{
                kCompletionHead + R"({"index":0,"text":"","logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":null})",
                R"({"id":"cmpl-x","object":"text_completion","created":123,"model":"m","choices":[],"usage":{"prompt_tokens":5,)"
                R"("completion_tokens":3,"total_tokens":8,"prompt_tokens_details":{"cached_tokens":2}}})",
                "[DONE]"}));
}

// return_token_ids: each chunk names the tokens since the previous one; a held-back token
// rides with the chunk that releases its text, or with the finish chunk.
TEST_F(Responses, TokenIdsRideWithTheChunkThatReleasesTheirText) {
  ResponseMeta m = meta(Api::kCompletion);
  m.token_ids = true;
  StreamEncoder enc(m, *tok_);
  EXPECT_EQ(enc.encode(0, output("ab", {{3, 0.0f, {}}})),
            std::vector<std::string>{kCompletionHead + R"({"index":0,"text":"ab","logprobs":null,"finish_reason":null,"token_ids":[3]}]})"});
  EXPECT_TRUE(enc.encode(0, output("", {{7, 0.0f, {}}})).empty());
  EXPECT_EQ(enc.encode(0, output("cd", {{9, 0.0f, {}}})),
            std::vector<std::string>{kCompletionHead + R"({"index":0,"text":"cd","logprobs":null,"finish_reason":null,"token_ids":[7,9]}]})"});
  RequestOutput end = last("", FinishKind::kLength);
  end.tokens = {{11, 0.0f, {}}};
  EXPECT_EQ(enc.encode(0, end),
            (std::vector<std::string>{
                kCompletionHead + R"({"index":0,"text":"","logprobs":null,"finish_reason":"length","stop_reason":null,"token_ids":[11]}]})",
                "[DONE]"}));
}

TEST_F(Responses, StopTokenIsTheStopReason) {
  StreamEncoder enc(meta(Api::kCompletion), *tok_);
  RequestOutput end = last("", FinishKind::kStop);
  end.stop_token = 9;
  EXPECT_EQ(enc.encode(0, end)[0], kCompletionHead + R"({"index":0,"text":"","logprobs":null,"finish_reason":"stop","stop_reason":9}]})");
}

TEST_F(Responses, EngineErrorInAStream) {
  StreamEncoder enc(meta(Api::kChat), *tok_);
  RequestOutput end = last("", FinishKind::kError);
  end.error = "out of memory";
  EXPECT_EQ(enc.encode(0, end), (std::vector<std::string>{
                                 R"({"error":{"message":"out of memory","type":"server_error","param":null,"code":"internal_error"}})", "[DONE]"}));
}

TEST_F(Responses, StreamOfSeveralChoicesEndsOnceAllHaveFinished) {
  ResponseMeta m = meta(Api::kChat, false, 0, true);
  m.choices = 2;
  StreamEncoder enc(m, *tok_);
  const std::string tail = R"(,"usage":null})";
  EXPECT_EQ(enc.start(), (std::vector<std::string>{
                             kChatHead + R"({"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}])" + tail,
                             kChatHead + R"({"index":1,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}])" + tail}));
  EXPECT_EQ(enc.encode(1, output("B")),
            std::vector<std::string>{kChatHead + R"({"index":1,"delta":{"content":"B"},"logprobs":null,"finish_reason":null}])" + tail});
  RequestOutput one = last("b", FinishKind::kLength);
  one.n_output_tokens = 4;
  EXPECT_EQ(enc.encode(1, one), (std::vector<std::string>{
                                    kChatHead + R"({"index":1,"delta":{"content":"b"},"logprobs":null,"finish_reason":null}])" + tail,
                                    kChatHead + R"({"index":1,"delta":{},"logprobs":null,"finish_reason":"length","stop_reason":null}])" + tail}));
  EXPECT_FALSE(enc.done());
  RequestOutput zero = last("A", FinishKind::kStop);
  zero.n_output_tokens = 2;
  EXPECT_EQ(enc.encode(0, zero),
            (std::vector<std::string>{
                kChatHead + R"({"index":0,"delta":{"content":"A"},"logprobs":null,"finish_reason":null}])" + tail,
                kChatHead + R"({"index":0,"delta":{},"logprobs":null,"finish_reason":"stop","stop_reason":null}])" + tail,
                R"({"id":"chatcmpl-x","object":"chat.completion.chunk","created":123,"model":"m","choices":[],"usage":{"prompt_tokens":5,)"
                R"("completion_tokens":6,"total_tokens":11,"prompt_tokens_details":{"cached_tokens":2}}})",
                "[DONE]"}));
  EXPECT_TRUE(enc.done());
  EXPECT_TRUE(enc.encode(1, output("late")).empty());
}

TEST_F(Responses, CollectedBodyOfSeveralChoices) {
  ResponseMeta m = meta(Api::kCompletion);
  m.choices = 3;
  ResponseCollector col(m, *tok_);
  col.add(2, last("two", FinishKind::kLength));
  col.add(0, output("ze"));
  col.add(1, last("one", FinishKind::kStop));
  EXPECT_FALSE(col.finished());
  RequestOutput zero = last("ro", FinishKind::kLength);
  zero.n_output_tokens = 7;
  col.add(0, zero);
  ASSERT_TRUE(col.finished());
  const Json j = Json::parse(col.body());
  ASSERT_EQ(j["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(j["choices"][i]["index"], i);
  EXPECT_EQ(j["choices"][0]["text"], "zero");
  EXPECT_EQ(j["choices"][1]["text"], "one");
  EXPECT_EQ(j["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][2]["text"], "two");
  EXPECT_EQ(j["usage"], Json::parse(R"({"prompt_tokens":5,"completion_tokens":13,"total_tokens":18,"prompt_tokens_details":{"cached_tokens":2}})"));
}

TEST_F(Responses, EchoPutsThePromptAndItsLogprobsFirst) {
  ResponseMeta m = meta(Api::kCompletion, true, 1);
  m.echo_text = "Hi";
  m.echo_tokens = {72, 105};
  RequestOutput out = last("", FinishKind::kLength);
  out.prompt_logprobs = {{105, -0.5f, {{105, -0.5f}}}};
  out.tokens = {{300, -1.0f, {{300, -1.0f}}}};
  out.text = piece(300);
  const std::string h = piece(72), i = piece(105), x = piece(300);

  ResponseCollector col(m, *tok_);
  col.add(0, out);
  const Json j = Json::parse(col.body());
  EXPECT_EQ(j["choices"][0]["text"], "Hi" + x);
  EXPECT_EQ(j["choices"][0]["logprobs"],
            Json({{"text_offset", {0, int64_t(h.size()), int64_t(h.size() + i.size())}},
                  {"token_logprobs", {nullptr, -0.5, -1.0}},
                  {"tokens", {h, i, x}},
                  {"top_logprobs", {nullptr, {{i, -0.5}}, {{x, -1.0}}}}}));

  StreamEncoder enc(m, *tok_);
  const std::vector<std::string> events = enc.encode(0, out);
  ASSERT_EQ(events.size(), 4u);  // echo, text, finish, [DONE]
  const Json echo = Json::parse(events[0]);
  EXPECT_EQ(echo["choices"][0]["text"], "Hi");
  EXPECT_EQ(echo["choices"][0]["logprobs"]["token_logprobs"], Json({nullptr, -0.5}));
  const Json text = Json::parse(events[1]);
  EXPECT_EQ(text["choices"][0]["text"], x);
  EXPECT_EQ(text["choices"][0]["logprobs"]["text_offset"], Json({int64_t(h.size() + i.size())}));
}

TEST_F(Responses, CompletionLogprobsCountOffsetsAcrossChunks) {
  StreamEncoder enc(meta(Api::kCompletion, true, 1), *tok_);
  const int32_t a = 300, b = 301, c = 302;
  const std::vector<std::string> first = enc.encode(0, output(piece(a), {{a, -0.5f, {{b, -0.25f}}}}));
  ASSERT_EQ(first.size(), 1u);
  const Json j1 = Json::parse(first[0]);
  EXPECT_EQ(j1["choices"][0]["logprobs"],
            Json({{"text_offset", {0}}, {"token_logprobs", {-0.5}}, {"tokens", {piece(a)}}, {"top_logprobs", {{{piece(b), -0.25}, {piece(a), -0.5}}}}}));
  const Json j2 = Json::parse(enc.encode(0, output(piece(c), {{c, -1.0f, {{c, -1.0f}}}}))[0]);
  EXPECT_EQ(j2["choices"][0]["logprobs"]["text_offset"], Json({int64_t(piece(a).size())}));
  EXPECT_EQ(j2["choices"][0]["logprobs"]["top_logprobs"], Json({{{piece(c), -1.0}}}));
}

TEST_F(Responses, ChatLogprobsHaveBytesAndTopLists) {
  int64_t offset = 0;
  const Json lp = logprobs_json(Api::kChat, *tok_, {{65, -0.125f, {{65, -0.125f}, {66, -2.0f}}}}, offset, 2);
  const std::string s = piece(65), t = piece(66);
  Json bytes_a = Json::array(), bytes_b = Json::array();
  for (unsigned char ch : tok_->token_bytes(65)) bytes_a.push_back(int(ch));
  for (unsigned char ch : tok_->token_bytes(66)) bytes_b.push_back(int(ch));
  EXPECT_EQ(lp, Json({{"content",
                       {{{"token", s},
                         {"logprob", -0.125},
                         {"bytes", bytes_a},
                         {"top_logprobs", {{{"token", s}, {"logprob", -0.125}, {"bytes", bytes_a}}, {{"token", t}, {"logprob", -2.0}, {"bytes", bytes_b}}}}}}}}));
}

TEST_F(Responses, CollectedCompletionBody) {
  ResponseCollector col(meta(Api::kCompletion), *tok_);
  col.add(0, output("Hello"));
  EXPECT_FALSE(col.finished());
  col.add(0, last(" world", FinishKind::kLength));
  ASSERT_TRUE(col.finished());
  EXPECT_FALSE(col.failed());
  EXPECT_EQ(col.body(), kCompletionHead + R"({"index":0,"text":"Hello world","logprobs":null,"finish_reason":"length","stop_reason":null}],)"
                                          R"("usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8,"prompt_tokens_details":{"cached_tokens":2}}})");
}

TEST_F(Responses, CollectedChatBody) {
  ResponseCollector col(meta(Api::kChat), *tok_);
  col.add(0, last("Hi!", FinishKind::kStop));
  EXPECT_EQ(col.body(), R"({"id":"chatcmpl-x","object":"chat.completion","created":123,"model":"m","choices":[{"index":0,)"
                        R"("message":{"role":"assistant","content":"Hi!"},"logprobs":null,"finish_reason":"stop","stop_reason":null}],)"
                        R"("usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8,"prompt_tokens_details":{"cached_tokens":2}}})");
}

TEST_F(Responses, CollectedChatLogprobsCoverEveryToken) {
  ResponseCollector col(meta(Api::kChat, true), *tok_);
  col.add(0, output("a", {{300, -1.0f, {}}}));
  col.add(0, output("", {{301, -2.0f, {}}}));
  RequestOutput end = last("b", FinishKind::kLength);
  end.tokens = {{302, -3.0f, {}}};
  col.add(0, end);
  const Json j = Json::parse(col.body());
  ASSERT_EQ(j["choices"][0]["logprobs"]["content"].size(), 3u);
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][2]["logprob"], -3.0);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "ab");
}

TEST_F(Responses, EngineErrorFailsTheCollectedResponse) {
  ResponseCollector col(meta(Api::kCompletion), *tok_);
  RequestOutput end = last("", FinishKind::kError);
  end.error = "the model failed";
  col.add(0, end);
  EXPECT_TRUE(col.finished());
  EXPECT_TRUE(col.failed());
  EXPECT_EQ(col.error(), "the model failed");

  ResponseMeta m = meta(Api::kCompletion);
  m.choices = 2;
  ResponseCollector two(m, *tok_);
  two.add(1, end);
  EXPECT_TRUE(two.finished()) << "one failed choice fails the response without waiting for the others";
  EXPECT_TRUE(two.failed());
}

}  // namespace
}  // namespace moe::server
