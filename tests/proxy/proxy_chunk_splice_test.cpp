// The relay's parse-free rewrite of a chunk (chunk_splice.h) against the reference: parse,
// take the proxy's id and created, cut the token ids out, serialize. Chunks are written as
// `moengine serve` writes them (nlohmann's dump), with text made to look like the keys the
// splice looks for.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "proxy/chunk_splice.h"

namespace moe::proxy {
namespace {

using Json = nlohmann::ordered_json;

const std::string kId = "cmpl-0123456789abcdef0123456789abcdef";
constexpr int64_t kCreated = 1733300000;

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json completion_chunk(const std::string& text, std::vector<int32_t> ids) {
  Json choice{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", nullptr}, {"stop_reason", nullptr}};
  choice["token_ids"] = ids;
  return Json{{"id", "cmpl-theirs"}, {"object", "text_completion"}, {"created", 1733299999}, {"model", "tiny"},
              {"choices", Json::array({choice})}};
}

Json chat_chunk(const Json& delta, std::vector<int32_t> ids) {
  Json choice{{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  choice["token_ids"] = ids;
  return Json{{"id", "chatcmpl-theirs"}, {"object", "chat.completion.chunk"}, {"created", 5}, {"model", "tiny"},
              {"choices", Json::array({choice})}};
}

struct Expected {
  std::string data;
  bool text;
  std::vector<int32_t> ids;
};

Expected reference(Json chunk, bool keep) {
  chunk["id"] = kId;
  chunk["created"] = kCreated;
  Expected e{"", false, {}};
  if (!chunk["choices"].empty()) {
    Json& c = chunk["choices"][0];
    for (const Json& id : c["token_ids"]) e.ids.push_back(id.get<int32_t>());
    if (!keep) c.erase("token_ids");
    const Json* t = c.contains("text") ? &c["text"] : c["delta"].contains("content") ? &c["delta"]["content"] : nullptr;
    e.text = t && t->is_string() && !t->get<std::string>().empty();
  }
  e.data = dump(chunk);
  return e;
}

void expect_same(const Json& chunk) {
  for (const bool keep : {false, true}) {
    const std::optional<SplicedChunk> s = splice_chunk(dump(chunk), kId, kCreated, keep);
    ASSERT_TRUE(s) << dump(chunk);
    const Expected e = reference(chunk, keep);
    EXPECT_EQ(s->data, e.data);
    EXPECT_EQ(s->text, e.text) << dump(chunk);
    EXPECT_EQ(s->token_ids, e.ids) << dump(chunk);
  }
}

TEST(ChunkSplice, EqualsParsingAndSerializingAgain) {
  expect_same(completion_chunk(" hello", {1234}));
  expect_same(completion_chunk("", {}));
  expect_same(completion_chunk("", {7, 8, 9}));
  expect_same(completion_chunk(R"(say "text":"no" and "error": and "logprobs":{ and ,"token_ids":[1])", {5}));
  expect_same(completion_chunk("back\\slash \"quote\" \n tab\t ünïcödé 漢字 🙂", {65535, 0, 2147483647}));
  expect_same(chat_chunk({{"role", "assistant"}, {"content", ""}}, {}));
  expect_same(chat_chunk({{"content", " hi"}}, {42}));
  expect_same(chat_chunk(Json::object(), {}));
  Json usage{{"id", "x"}, {"object", "text_completion"}, {"created", 1}, {"model", "m"}, {"choices", Json::array()},
             {"usage", {{"prompt_tokens", 2}, {"completion_tokens", 1}, {"total_tokens", 3}}}};
  expect_same(usage);
}

TEST(ChunkSplice, LeavesEverythingElseToTheParser) {
  Json logprobs = completion_chunk(" a", {1});
  logprobs["choices"][0]["logprobs"] = {{"text_offset", {0}}};
  Json handoff = completion_chunk("", {});
  handoff["kv_transfer_params"] = {{"remote_request_id", "r"}};
  Json two = completion_chunk(" a", {1});
  two["choices"].push_back(two["choices"][0]);
  Json reordered{{"object", "text_completion"}, {"id", "x"}, {"created", 1}, {"choices", Json::array()}};
  for (const std::string& chunk :
       {dump(logprobs), dump(handoff), dump(two), dump(reordered), std::string(R"({"error":{"message":"m"}})"),
        std::string("[DONE]"), std::string("not json"), std::string(R"({"id":"a\"b","object":"o","created":1,"x":1})"),
        std::string(R"({"id":"a","object":"o","created":1.5,"x":1})"),
        std::string(R"({"id":"a","object":"o","created":1,"choices":[{"token_ids":[1]}]})"),
        std::string(R"({"id":"a","object":"o","created":1,"choices":[{"index":0,"token_ids":[1,x]}]})"),
        std::string(R"({"id":"a","object":"o","created":1,"choices":[{"token_ids":[1,2)")}) {
    EXPECT_FALSE(splice_chunk(chunk, kId, kCreated, false)) << chunk;
  }
}

}  // namespace
}  // namespace moe::proxy
