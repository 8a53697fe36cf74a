// Request bodies for both endpoints and the reading of streamed answers into timings.
#include <gtest/gtest.h>

#include "core/error.h"
#include "loadgen/openai.h"

namespace moe::loadgen {
namespace {

using std::chrono::milliseconds;

TEST(Endpoint, ParsesTheTwoPaths) {
  EXPECT_EQ(parse_endpoint("/v1/completions"), Endpoint::Completions);
  EXPECT_EQ(parse_endpoint("/v1/chat/completions"), Endpoint::ChatCompletions);
  EXPECT_THROW(parse_endpoint("/v1/embeddings"), Error);
}

TEST(RequestBody, CompletionsWithTokenIdsStreamsWithUsage) {
  SampleRequest r;
  r.prompt_ids = {5, 6, 7};
  r.output_len = 16;
  RequestOptions o;
  o.model = "m";
  o.ignore_eos = true;
  o.temperature = 0.0;
  const auto body = request_body(Endpoint::Completions, r, o);
  EXPECT_EQ(body, nlohmann::json::parse(R"({"model": "m", "prompt": [5, 6, 7], "max_tokens": 16, "stream": true,
      "stream_options": {"include_usage": true}, "temperature": 0.0, "ignore_eos": true})"));
}

TEST(RequestBody, ChatSendsOneUserMessageAndExtraBodyWins) {
  SampleRequest r;
  r.prompt_text = "hello there";
  r.output_len = 4;
  RequestOptions o;
  o.model = "m";
  o.extra_body = {{"top_k", 1}, {"stream", true}, {"max_completion_tokens", 5}};
  const auto body = request_body(Endpoint::ChatCompletions, r, o);
  EXPECT_EQ(body["messages"], nlohmann::json::parse(R"([{"role": "user", "content": "hello there"}])"));
  EXPECT_EQ(body["max_completion_tokens"], 5);
  EXPECT_EQ(body["top_k"], 1);
  EXPECT_FALSE(body.contains("ignore_eos"));
  EXPECT_FALSE(body.contains("temperature"));
  EXPECT_FALSE(body.contains("max_tokens"));
}

TEST(RequestBody, ChatRejectsTokenIds) {
  SampleRequest r;
  r.prompt_ids = {1};
  EXPECT_THROW(request_body(Endpoint::ChatCompletions, r, {}), Error);
}

TEST(StreamRecorder, TimesContentChunksAndTakesTokensFromUsage) {
  const Clock::time_point t0{};
  StreamRecorder rec(Endpoint::ChatCompletions, t0);
  // A role-only first chunk (sent before any token) does not count as the first token.
  rec.on_event(R"({"choices":[{"index":0,"delta":{"role":"assistant"}}]})", t0 + milliseconds(5));
  rec.on_event(R"({"choices":[{"index":0,"delta":{"content":"Hel"}}]})", t0 + milliseconds(100));
  rec.on_event(R"({"choices":[{"index":0,"delta":{"content":"lo"}}]})", t0 + milliseconds(130));
  rec.on_event(R"({"choices":[{"index":0,"delta":{"content":"!"}}]})", t0 + milliseconds(180));
  rec.on_event(R"({"choices":[{"index":0,"delta":{},"finish_reason":"length"}]})", t0 + milliseconds(181));
  rec.on_event(R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":4,"total_tokens":16}})",
               t0 + milliseconds(182));
  rec.on_event("[DONE]", t0 + milliseconds(182));
  const RequestResult r = rec.finish(t0 + milliseconds(190), 99);
  ASSERT_TRUE(r.success) << r.error;
  EXPECT_NEAR(r.ttft_s, 0.100, 1e-12);
  ASSERT_EQ(r.itl_s.size(), 2u);
  EXPECT_NEAR(r.itl_s[0], 0.030, 1e-12);
  EXPECT_NEAR(r.itl_s[1], 0.050, 1e-12);
  EXPECT_NEAR(r.e2e_s, 0.190, 1e-12);
  EXPECT_EQ(r.prompt_tokens, 12);
  EXPECT_EQ(r.output_tokens, 4);
  EXPECT_EQ(r.generated_text, "Hello!");
}

TEST(StreamRecorder, WithoutUsageCountsContentChunksAndTrustsTheDataset) {
  const Clock::time_point t0{};
  StreamRecorder rec(Endpoint::Completions, t0);
  rec.on_event(R"({"choices":[{"text":"a"}]})", t0 + milliseconds(10));
  rec.on_event(R"({"choices":[{"text":""}]})", t0 + milliseconds(15));
  rec.on_event(R"({"choices":[{"text":"b"}]})", t0 + milliseconds(20));
  const RequestResult r = rec.finish(t0 + milliseconds(21), 7);
  ASSERT_TRUE(r.success);
  EXPECT_EQ(r.output_tokens, 2);
  EXPECT_EQ(r.prompt_tokens, 7);
  ASSERT_EQ(r.itl_s.size(), 1u);
  EXPECT_NEAR(r.itl_s[0], 0.010, 1e-12);
}

TEST(StreamRecorder, ATextlessAnswerTimesItsFirstChoice) {
  const Clock::time_point t0{};
  StreamRecorder rec(Endpoint::Completions, t0);
  rec.on_event(R"({"choices":[{"text":"","finish_reason":"stop"}]})", t0 + milliseconds(40));
  rec.on_event(R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}})", t0 + milliseconds(41));
  const RequestResult r = rec.finish(t0 + milliseconds(42), 3);
  ASSERT_TRUE(r.success);
  EXPECT_NEAR(r.ttft_s, 0.040, 1e-12);
  EXPECT_EQ(r.output_tokens, 1);
}

TEST(StreamRecorder, StreamErrorsAndGarbageThrowAndEmptyStreamsFail) {
  StreamRecorder rec(Endpoint::Completions, Clock::time_point{});
  try {
    rec.on_event(R"({"error":{"message":"prompt too long","type":"invalid_request_error"}})", Clock::time_point{});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prompt too long"), std::string::npos);
  }
  EXPECT_THROW(rec.on_event("{not json", Clock::time_point{}), Error);
  EXPECT_THROW(rec.on_event("[1, 2]", Clock::time_point{}), Error);
  const RequestResult r = rec.finish(Clock::time_point{}, 1);
  EXPECT_FALSE(r.success);
  EXPECT_NE(r.error.find("without a single choice"), std::string::npos);
}

}  // namespace
}  // namespace moe::loadgen
