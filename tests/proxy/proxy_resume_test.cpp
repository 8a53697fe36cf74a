// Resuming a stream whose decode instance failed: the continuing request, which token ids
// the rewriter takes out of the legs' chunks, and the resumed events in the client's shape.
#include <gtest/gtest.h>

#include "proxy/resume.h"
#include "proxy/stream_events.h"

namespace moe::proxy {
namespace {

TEST(Resume, TheContinuingRequestIsTheTokensSoFarWithTheSamplingKept) {
  const Json client = Json::parse(
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":10,"temperature":0,"stop":["x"],)"
      R"("ignore_eos":true,"stream":true,"stream_options":{"include_usage":true},"n":1})");
  const std::optional<Json> body = resume_body(client, {1, 2, 3}, {7, 8});
  ASSERT_TRUE(body);
  EXPECT_EQ(*body, Json::parse(R"({"model":"m","temperature":0,"stop":["x"],"ignore_eos":true,)"
                               R"("stream_options":{"include_usage":true},"max_tokens":8,"prompt":[1,2,3,7,8],"stream":true})"));
  EXPECT_FALSE(resume_body(client, {1}, std::vector<int32_t>(10, 5)));
  Json open = client;
  open.erase("max_tokens");
  EXPECT_FALSE(resume_body(open, {1}, {2})->contains("max_tokens"));
}

TEST(Resume, AnswersWithLogprobsOrEchoAreNotResumed) {
  EXPECT_TRUE(resumable(Json::parse(R"({"prompt":"a","logprobs":null})")));
  EXPECT_TRUE(resumable(Json::parse(R"({"prompt":"a","logprobs":false})")));
  EXPECT_FALSE(resumable(Json::parse(R"({"prompt":"a","logprobs":2})")));
  EXPECT_FALSE(resumable(Json::parse(R"({"messages":[],"logprobs":true})")));
  EXPECT_FALSE(resumable(Json::parse(R"({"prompt":"a","echo":true})")));
}

TEST(Resume, TheRewriterTakesTokenIdsOutUnlessTheClientAskedForThem) {
  const std::string chunk = R"({"id":"d","object":"text_completion","created":2,"model":"m","choices":[{"index":0,"text":" B","token_ids":[5,6]}]})";
  StreamRewriter plain(Identity{"cmpl-1", 9});
  const Relay r = plain.decode_event(chunk);
  EXPECT_EQ(r.token_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(*r.data, R"({"id":"cmpl-1","object":"text_completion","created":9,"model":"m","choices":[{"index":0,"text":" B"}]})");
  StreamRewriter keeping(Identity{"cmpl-1", 9}, true);
  EXPECT_NE(keeping.decode_event(chunk).data->find(R"("token_ids":[5,6])"), std::string::npos);
}

TEST(Resume, ResumedEventsBecomeTheChatClientsDeltasWithItsUsage) {
  const ResumeConverter chat(Api::kChat, 20, 4);
  EXPECT_EQ(chat.convert(R"({"id":"c","object":"text_completion","created":9,"model":"m","choices":[{"index":0,"text":" C","logprobs":null,"finish_reason":null}]})"),
            R"({"id":"c","object":"chat.completion.chunk","created":9,"model":"m","choices":[{"index":0,"logprobs":null,"finish_reason":null,"delta":{"content":" C"}}]})");
  EXPECT_EQ(chat.convert(R"({"id":"c","object":"text_completion","created":9,"model":"m","choices":[{"index":0,"text":"","finish_reason":"length"}]})"),
            R"({"id":"c","object":"chat.completion.chunk","created":9,"model":"m","choices":[{"index":0,"finish_reason":"length","delta":{}}]})");
  const std::string usage =
      R"({"id":"c","object":"text_completion","created":9,"model":"m","choices":[],"usage":{"prompt_tokens":24,"completion_tokens":6,"total_tokens":30,"prompt_tokens_details":{"cached_tokens":24}}})";
  EXPECT_EQ(ResumeConverter(Api::kCompletion, 20, 4).convert(usage),
            R"({"id":"c","object":"text_completion","created":9,"model":"m","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":10,"total_tokens":30}})");
  EXPECT_EQ(chat.convert("[DONE]"), "[DONE]");
}

}  // namespace
}  // namespace moe::proxy
