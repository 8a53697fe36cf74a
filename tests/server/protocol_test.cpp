// Request parsing and validation: every bad input gets its exact status, type, code, param
// and message; good inputs become the engine's parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "server/api_error.h"
#include "server/protocol.h"

namespace moe::server {
namespace {

struct Expected {
  int status;
  const char* code;
  const char* param;
  std::string message;
};

ApiError error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no ApiError was thrown";
  return internal_error("none");
}

void expect_error(const std::function<void()>& f, const Expected& want) {
  const ApiError e = error_of(f);
  EXPECT_EQ(int(e.status()), want.status) << e.what();
  EXPECT_EQ(e.type(), want.status == 500 ? "server_error" : "invalid_request_error");
  EXPECT_EQ(e.code(), want.code);
  EXPECT_EQ(e.param(), want.param);
  EXPECT_EQ(std::string(e.what()), want.message);
}

CompletionRequest completion(const std::string& extra_fields) {
  return parse_completion_request(parse_json_body(R"({"model": "m", "prompt": "Hi")" + extra_fields + "}"));
}

ChatRequest chat(const std::string& extra_fields) {
  return parse_chat_request(parse_json_body(R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}])" + extra_fields + "}"));
}

void bad_completion(const std::string& fields, const Expected& want) {
  SCOPED_TRACE(fields);
  expect_error([&] { completion(fields); }, want);
}

void bad_chat(const std::string& fields, const Expected& want) {
  SCOPED_TRACE(fields);
  expect_error([&] { chat(fields); }, want);
}

TEST(Protocol, MalformedJsonIs400) {
  const ApiError e = error_of([] { parse_json_body("{\"model\": "); });
  EXPECT_EQ(int(e.status()), 400);
  EXPECT_EQ(e.code(), "invalid_json");
  EXPECT_EQ(e.param(), "");
  EXPECT_EQ(std::string(e.what()).rfind("the request body is not valid JSON: parse error at line 1, column 11", 0), 0u) << e.what();
}

TEST(Protocol, NumberTooLargeForADoubleIs400) {
  // Found by protocol_fuzz: nlohmann reports it as out_of_range, not as a parse error.
  expect_error([] { parse_json_body(R"({"model": "m", "prompt": [1e999]})"); },
               {400, "invalid_json", "", "the request body is not valid JSON: number overflow parsing '1e999'"});
}

TEST(Protocol, BodyThatIsNotAnObjectIs422) {
  expect_error([] { parse_json_body("[1, 2]"); }, {422, "invalid_type", "", "the request body must be a JSON object, got an array"});
}

TEST(Protocol, MissingRequiredFieldsAre422) {
  expect_error([] { parse_completion_request(parse_json_body(R"({"model": "m"})")); },
               {422, "missing_required_parameter", "prompt", "\"prompt\" is required"});
  expect_error([] { parse_chat_request(parse_json_body(R"({"model": "m"})")); },
               {422, "missing_required_parameter", "messages", "\"messages\" is required"});
  bad_chat(R"(, "messages": [{"content": "x"}])", {422, "missing_required_parameter", "messages[0].role", "\"messages[0].role\" is required"});
  // null is "not set", so a required field set to null is missing.
  expect_error([] { parse_completion_request(parse_json_body(R"({"model": "m", "prompt": null})")); },
               {422, "missing_required_parameter", "prompt", "\"prompt\" is required"});
}

TEST(Protocol, ModelMayBeLeftOut) {
  // Clients that send no model (or null) get the served one, as from vLLM and llama-server.
  EXPECT_FALSE(parse_completion_request(parse_json_body(R"({"prompt": "x"})")).gen.model);
  EXPECT_FALSE(parse_completion_request(parse_json_body(R"({"model": null, "prompt": "x"})")).gen.model);
  EXPECT_FALSE(parse_chat_request(parse_json_body(R"({"messages": [{"role": "user", "content": "x"}]})")).gen.model);
  EXPECT_EQ(*parse_completion_request(parse_json_body(R"({"model": "m", "prompt": "x"})")).gen.model, "m");
}

TEST(Protocol, WrongTypesAre422) {
  expect_error([] { parse_completion_request(parse_json_body(R"({"model": 5, "prompt": "x"})")); },
               {422, "invalid_type", "model", "\"model\" must be a string, got an integer"});
  bad_completion(R"(, "max_tokens": "16")", {422, "invalid_type", "max_tokens", "\"max_tokens\" must be an integer, got a string"});
  bad_completion(R"(, "max_tokens": 1.5)", {422, "invalid_type", "max_tokens", "\"max_tokens\" must be an integer, got the number 1.5"});
  bad_completion(R"(, "temperature": "hot")", {422, "invalid_type", "temperature", "\"temperature\" must be a number, got a string"});
  bad_completion(R"(, "stream": 1)", {422, "invalid_type", "stream", "\"stream\" must be a boolean, got an integer"});
  bad_completion(R"(, "seed": "1")", {422, "invalid_type", "seed", "\"seed\" must be an integer, got a string"});
  bad_completion(R"(, "stop": 5)", {422, "invalid_type", "stop", "\"stop\" must be a string or an array of strings, got an integer"});
  bad_completion(R"(, "stop": ["a", 1])", {422, "invalid_type", "stop", "\"stop[1]\" must be a string, got an integer"});
  bad_completion(R"(, "stop_token_ids": ["a"])", {422, "invalid_type", "stop_token_ids", "\"stop_token_ids[0]\" must be an integer, got a string"});
  bad_completion(R"(, "stop_token_ids": 3)", {422, "invalid_type", "stop_token_ids", "\"stop_token_ids\" must be an array, got an integer"});
  bad_completion(R"(, "stream_options": {"include_usage": "yes"}, "stream": true)",
                 {422, "invalid_type", "stream_options.include_usage", "\"stream_options.include_usage\" must be a boolean, got a string"});
  bad_completion(R"(, "logit_bias": [1])", {422, "invalid_type", "logit_bias", "\"logit_bias\" must be an object, got an array"});
  bad_chat(R"(, "logprobs": 5)", {422, "invalid_type", "logprobs", "\"logprobs\" must be a boolean, got an integer"});
  bad_chat(R"(, "messages": "hi")", {422, "invalid_type", "messages", "\"messages\" must be an array, got a string"});
  bad_chat(R"(, "messages": ["hi"])", {422, "invalid_type", "messages[0]", "\"messages[0]\" must be an object, got a string"});
  bad_chat(R"(, "messages": [{"role": "user", "content": 5}])",
           {422, "invalid_type", "messages[0].content", "\"messages[0].content\" must be a string or an array of content parts, got an integer"});
  bad_chat(R"(, "messages": [{"role": 1, "content": "x"}])", {422, "invalid_type", "messages[0].role", "\"messages[0].role\" must be a string, got an integer"});
}

TEST(Protocol, TypesAreCheckedBeforeValues) {
  bad_completion(R"(, "max_tokens": 0, "temperature": "x")", {422, "invalid_type", "temperature", "\"temperature\" must be a number, got a string"});
}

TEST(Protocol, PromptShapes) {
  expect_error([] { parse_completion_request(parse_json_body(R"({"model": "m", "prompt": {}})")); },
               {422, "invalid_type", "prompt", "\"prompt\" must be a string or an array of token ids, got an object"});
  expect_error([] { parse_completion_request(parse_json_body(R"({"model": "m", "prompt": [1, "a"]})")); },
               {422, "invalid_type", "prompt", "\"prompt\" token ids must be integers, got a string at index 1"});
  expect_error([] { parse_completion_request(parse_json_body(R"({"model": "m", "prompt": ["a", "b", "c"]})")); },
               {400, "unsupported_value", "prompt", "\"prompt\" must be a single prompt: a list of 3 prompts is not supported"});
  expect_error([] { parse_completion_request(parse_json_body(R"({"model": "m", "prompt": ""})")); },
               {400, "invalid_value", "prompt", "\"prompt\" must not be empty"});
  expect_error([] { parse_completion_request(parse_json_body(R"({"model": "m", "prompt": []})")); },
               {400, "invalid_value", "prompt", "\"prompt\" must not be empty"});

  EXPECT_EQ(parse_completion_request(parse_json_body(R"({"model": "m", "prompt": ["one"]})")).prompt_text, "one");
  const CompletionRequest ids = parse_completion_request(parse_json_body(R"({"model": "m", "prompt": [[5, 6, 7]]})"));
  EXPECT_FALSE(ids.prompt_text);
  EXPECT_EQ(ids.prompt_ids, (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(parse_completion_request(parse_json_body(R"({"model": "m", "prompt": [1, 2]})")).prompt_ids, (std::vector<int64_t>{1, 2}));
}

TEST(Protocol, OutOfRangeValuesAre400) {
  bad_completion(R"(, "max_tokens": 0)", {400, "invalid_value", "max_tokens", "\"max_tokens\" must be at least 1, got 0"});
  bad_completion(R"(, "max_tokens": 1e30)", {400, "invalid_value", "max_tokens", "\"max_tokens\" is out of the 64-bit integer range, got 1e+30"});
  bad_chat(R"(, "max_completion_tokens": -3)", {400, "invalid_value", "max_completion_tokens", "\"max_completion_tokens\" must be at least 1, got -3"});
  bad_completion(R"(, "temperature": -1)", {400, "invalid_value", "temperature", "\"temperature\" must be a finite number >= 0, got -1"});
  bad_completion(R"(, "top_p": 0)", {400, "invalid_value", "top_p", "\"top_p\" must be in (0, 1], got 0"});
  bad_completion(R"(, "top_p": 1.5)", {400, "invalid_value", "top_p", "\"top_p\" must be in (0, 1], got 1.5"});
  bad_completion(R"(, "top_k": -2)", {400, "invalid_value", "top_k", "\"top_k\" must be -1 or 0 (off) or at least 1, got -2"});
  bad_completion(R"(, "min_p": 2)", {400, "invalid_value", "min_p", "\"min_p\" must be in [0, 1], got 2"});
  bad_completion(R"(, "repetition_penalty": 0)", {400, "invalid_value", "repetition_penalty", "\"repetition_penalty\" must be a finite number > 0, got 0"});
  bad_completion(R"(, "presence_penalty": 3)", {400, "invalid_value", "presence_penalty", "\"presence_penalty\" must be in [-2, 2], got 3"});
  bad_completion(R"(, "frequency_penalty": -2.5)", {400, "invalid_value", "frequency_penalty", "\"frequency_penalty\" must be in [-2, 2], got -2.5"});
  bad_completion(R"(, "logprobs": 21)", {400, "invalid_value", "logprobs", "\"logprobs\" must be in [0, 20], got 21"});
  bad_completion(R"(, "stop": [""])", {400, "invalid_value", "stop", "\"stop\" strings must not be empty"});
  bad_completion(R"(, "stop_token_ids": [-1])", {400, "invalid_value", "stop_token_ids", "\"stop_token_ids\" has the invalid token id -1"});
  bad_completion(R"(, "priority": 1e10)", {400, "invalid_value", "priority", "\"priority\" must fit in 32 bits, got 10000000000"});
  bad_completion(R"(, "stream_options": {"include_usage": true})", {400, "invalid_value", "stream_options", "\"stream_options\" is only allowed when \"stream\" is true"});
  bad_chat(R"(, "top_logprobs": 21, "logprobs": true)", {400, "invalid_value", "top_logprobs", "\"top_logprobs\" must be in [0, 20], got 21"});
  bad_chat(R"(, "top_logprobs": 3)", {400, "invalid_value", "top_logprobs", "\"top_logprobs\" needs \"logprobs\": true"});
  bad_chat(R"(, "messages": [])", {400, "invalid_value", "messages", "\"messages\" must not be empty"});
}

TEST(Protocol, UnsupportedFeaturesAre400) {
  bad_completion(R"(, "best_of": 3)",
                 {400, "unsupported_value", "best_of", "\"best_of\" must be 1 or equal to \"n\" (1): returning the best of more choices is not supported, got 3"});
  bad_completion(R"(, "n": 2, "best_of": 4)",
                 {400, "unsupported_value", "best_of", "\"best_of\" must be 1 or equal to \"n\" (2): returning the best of more choices is not supported, got 4"});
  bad_chat(R"(, "echo": true)", {400, "unsupported_value", "echo", "\"echo\": true is supported for completions only"});
  bad_completion(R"(, "suffix": "end")", {400, "unsupported_value", "suffix", "\"suffix\" is not supported"});
  bad_chat(R"(, "response_format": {"type": "json_object"})",
           {400, "unsupported_value", "response_format", "\"response_format\" of type \"json_object\" is not supported; only \"text\""});
  bad_chat(R"(, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])",
           {400, "unsupported_value", "messages[0].content[0].type", "content parts of type \"image_url\" are not supported; only \"text\""});
}

TEST(Protocol, EchoAsksForPromptLogprobsWithLogprobs) {
  EXPECT_FALSE(completion("").gen.echo);
  const CompletionRequest plain = completion(R"(, "echo": true)");
  EXPECT_TRUE(plain.gen.echo);
  EXPECT_EQ(plain.gen.params.prompt_logprobs, -1);
  const CompletionRequest scored = completion(R"(, "echo": true, "logprobs": 2)");
  EXPECT_EQ(scored.gen.params.prompt_logprobs, 2);
  EXPECT_EQ(completion(R"(, "logprobs": 2)").gen.params.prompt_logprobs, -1);
}

TEST(Protocol, SeveralChoices) {
  EXPECT_EQ(completion("").gen.n, 1);
  EXPECT_EQ(completion(R"(, "n": 3)").gen.n, 3);
  EXPECT_EQ(chat(R"(, "n": 64, "best_of": 64)").gen.n, 64);
  bad_chat(R"(, "n": 0)", {400, "invalid_value", "n", "\"n\" must be in [1, 64], got 0"});
  bad_completion(R"(, "n": 65)", {400, "invalid_value", "n", "\"n\" must be in [1, 64], got 65"});
}

TEST(Protocol, LogitBiasIsReadAndChecked) {
  const ChatRequest c = chat(R"(, "logit_bias": {"5": 10, "0": -100, "17": 2.5})");
  auto bias = c.gen.params.sampling.logit_bias;
  std::sort(bias.begin(), bias.end());
  EXPECT_EQ(bias, (std::vector<std::pair<int32_t, float>>{{0, -100.0f}, {5, 10.0f}, {17, 2.5f}}));
  EXPECT_TRUE(completion(R"(, "logit_bias": {})").gen.params.sampling.logit_bias.empty());
  EXPECT_TRUE(completion(R"(, "logit_bias": null)").gen.params.sampling.logit_bias.empty());

  bad_completion(R"(, "logit_bias": {"x": 1})", {400, "invalid_value", "logit_bias", "\"logit_bias\" keys must be token ids (integers >= 0), got \"x\""});
  bad_completion(R"(, "logit_bias": {"-3": 1})", {400, "invalid_value", "logit_bias", "\"logit_bias\" keys must be token ids (integers >= 0), got \"-3\""});
  bad_completion(R"(, "logit_bias": {"5 ": 1})", {400, "invalid_value", "logit_bias", "\"logit_bias\" keys must be token ids (integers >= 0), got \"5 \""});
  bad_completion(R"(, "logit_bias": {"99999999999": 1})",
                 {400, "invalid_value", "logit_bias", "\"logit_bias\" keys must be token ids (integers >= 0), got \"99999999999\""});
  bad_completion(R"(, "logit_bias": {"5": "up"})", {422, "invalid_type", "logit_bias", "\"logit_bias\" values must be numbers, got a string for token 5"});
  bad_chat(R"(, "logit_bias": {"5": 100.5})", {400, "invalid_value", "logit_bias", "\"logit_bias\" for token 5 must be in [-100, 100], got 100.5"});
}

TEST(Protocol, CompletionFieldsBecomeEngineParams) {
  const CompletionRequest c = completion(R"(, "max_tokens": 16.0, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.1,
      "repetition_penalty": 1.1, "presence_penalty": 0.5, "frequency_penalty": -0.5, "seed": 7, "stop": "END",
      "stop_token_ids": [3, 4], "ignore_eos": true, "skip_special_tokens": false, "logprobs": 2, "n": 1, "priority": -3,
      "stream": true, "stream_options": {"include_usage": true}, "user": "ignored", "logit_bias": {}, "suffix": null)");
  EXPECT_EQ(c.gen.model, "m");
  EXPECT_EQ(c.prompt_text, "Hi");
  EXPECT_TRUE(c.add_special_tokens);
  EXPECT_EQ(c.gen.max_tokens, 16);
  const GenerateParams& p = c.gen.params;
  EXPECT_FLOAT_EQ(p.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(p.sampling.top_p, 0.9f);
  EXPECT_EQ(p.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(p.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(p.sampling.repetition_penalty, 1.1f);
  EXPECT_FLOAT_EQ(p.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(p.sampling.frequency_penalty, -0.5f);
  EXPECT_EQ(p.sampling.seed, 7u);
  EXPECT_TRUE(p.sampling.logprobs);
  EXPECT_EQ(p.sampling.top_logprobs, 2);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"END"}));
  EXPECT_EQ(p.stop_token_ids, (std::vector<int32_t>{3, 4}));
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_FALSE(p.skip_special_tokens);
  EXPECT_EQ(p.priority, -3);
  EXPECT_TRUE(c.gen.stream);
  EXPECT_TRUE(c.gen.include_usage);

  const CompletionRequest d = completion("");
  EXPECT_FALSE(d.gen.max_tokens);
  EXPECT_FLOAT_EQ(d.gen.params.sampling.temperature, 1.0f);
  EXPECT_FALSE(d.gen.params.sampling.seed);
  EXPECT_FALSE(d.gen.params.sampling.logprobs);
  EXPECT_TRUE(d.gen.params.skip_special_tokens);
  EXPECT_FALSE(d.gen.stream);
}

TEST(Protocol, ChatMessagesAndOptions) {
  const ChatRequest c = chat(R"(, "messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}], "name": "ann"},
      {"role": "assistant", "content": null}],
      "max_tokens": 5, "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 3,
      "chat_template_kwargs": {"enable_thinking": false}, "add_generation_prompt": false)");
  ASSERT_EQ(c.messages.size(), 3u);
  EXPECT_EQ(c.messages[1]["content"], "one\ntwo");
  EXPECT_EQ(c.messages[1]["name"], "ann");
  EXPECT_TRUE(c.messages[2]["content"].is_null());
  EXPECT_EQ(c.gen.max_tokens, 9);
  EXPECT_EQ(c.gen.max_tokens_param, "max_completion_tokens");
  EXPECT_TRUE(c.gen.params.sampling.logprobs);
  EXPECT_EQ(c.gen.params.sampling.top_logprobs, 3);
  EXPECT_EQ(c.template_extra, Json({{"enable_thinking", false}}));
  EXPECT_FALSE(c.add_generation_prompt);
  EXPECT_FALSE(c.add_special_tokens);
  EXPECT_EQ(chat(R"(, "max_tokens": 5)").gen.max_tokens, 5);
}

TEST(Protocol, FitToContext) {
  const RequestLimits limits{512, 100, 1000};
  GenerationFields g = completion("").gen;
  fit_to_context(g, 30, limits, "prompt");
  EXPECT_EQ(g.params.max_tokens, 70);  // the room left, as vLLM
  g = completion(R"(, "max_tokens": 70)").gen;
  fit_to_context(g, 30, limits, "prompt");
  EXPECT_EQ(g.params.max_tokens, 70);

  expect_error([&] { GenerationFields x = completion("").gen; fit_to_context(x, 100, limits, "prompt"); },
               {400, "context_length_exceeded", "prompt",
                "This model's maximum context length is 100 tokens. However, your prompt has 100 tokens, which leaves no room for a "
                "completion. Please reduce the length of the prompt."});
  expect_error([&] { GenerationFields x = completion(R"(, "max_tokens": 71)").gen; fit_to_context(x, 30, limits, "prompt"); },
               {400, "context_length_exceeded", "max_tokens",
                "This model's maximum context length is 100 tokens. However, you requested 101 tokens (30 in the prompt, 71 for the "
                "completion). Please reduce the length of the prompt or the completion."});
  expect_error([&] { GenerationFields x = chat(R"(, "max_completion_tokens": 99)").gen; fit_to_context(x, 2, limits, "messages"); },
               {400, "context_length_exceeded", "max_completion_tokens",
                "This model's maximum context length is 100 tokens. However, you requested 101 tokens (2 in the messages, 99 for the "
                "completion). Please reduce the length of the messages or the completion."});
  expect_error([&] { GenerationFields x = completion(R"(, "stop_token_ids": [512])").gen; fit_to_context(x, 3, limits, "prompt"); },
               {400, "invalid_value", "stop_token_ids", "\"stop_token_ids\" has the token id 512, outside the vocabulary (0..511)"});

  // A KV cache smaller than max_model_len bounds a request too.
  const RequestLimits small_kv{512, 100, 64};
  EXPECT_EQ(context_limit(small_kv), 64);
  g = completion("").gen;
  fit_to_context(g, 4, small_kv, "prompt");
  EXPECT_EQ(g.params.max_tokens, 60);
}

TEST(Protocol, TokenIdsAreCheckedAgainstTheVocabulary) {
  EXPECT_EQ(check_token_ids({0, 511}, 512, "prompt"), (std::vector<int32_t>{0, 511}));
  expect_error([] { check_token_ids({1, 512}, 512, "prompt"); },
               {400, "invalid_value", "prompt", "\"prompt\" has the token id 512, outside the vocabulary (0..511)"});
  expect_error([] { check_token_ids({-1}, 512, "tokens"); },
               {400, "invalid_value", "tokens", "\"tokens\" has the token id -1, outside the vocabulary (0..511)"});
}

TEST(Protocol, TokenizeAndDetokenizeBodies) {
  const TokenizeRequest t = parse_tokenize_request(parse_json_body(R"({"prompt": "hello"})"));
  EXPECT_EQ(t.prompt, "hello");
  EXPECT_TRUE(t.add_special_tokens);
  EXPECT_FALSE(t.chat);
  const TokenizeRequest m = parse_tokenize_request(parse_json_body(R"({"model": "x", "messages": [{"role": "user", "content": "a"}]})"));
  ASSERT_TRUE(m.chat);
  EXPECT_FALSE(m.add_special_tokens);
  EXPECT_TRUE(m.chat->add_generation_prompt);
  EXPECT_EQ(m.model, "x");
  expect_error([] { parse_tokenize_request(parse_json_body("{}")); }, {422, "missing_required_parameter", "prompt", "\"prompt\" is required"});
  EXPECT_EQ(parse_detokenize_request(parse_json_body(R"({"tokens": [1, 2]})")).tokens, (std::vector<int64_t>{1, 2}));
  expect_error([] { parse_detokenize_request(parse_json_body(R"({"tokens": "1"})")); },
               {422, "invalid_type", "tokens", "\"tokens\" must be an array, got a string"});
}

TEST(ApiErrors, BodyShape) {
  EXPECT_EQ(error_body(invalid_value("max_tokens", "bad")),
            R"({"error":{"message":"bad","type":"invalid_request_error","param":"max_tokens","code":"invalid_value"}})");
  EXPECT_EQ(error_body(invalid_json("not json")),
            R"({"error":{"message":"not json","type":"invalid_request_error","param":null,"code":"invalid_json"}})");
  const http::Response r = error_response(queue_full("full"));
  EXPECT_EQ(int(r.result()), 429);
  EXPECT_EQ(r[http::Field::retry_after], "1");
  EXPECT_EQ(r[http::Field::content_type], "application/json");
  EXPECT_EQ(r.body(), R"({"error":{"message":"full","type":"rate_limit_error","param":null,"code":"queue_full"}})");
}

TEST(ApiErrors, StatusesTypesAndCodes) {
  struct Case {
    ApiError e;
    int status;
    const char* type;
    const char* code;
  };
  const Case cases[] = {
      {model_not_found("gpt-4"), 404, "invalid_request_error", "model_not_found"},
      {unauthorized("no key"), 401, "invalid_request_error", "invalid_api_key"},
      {internal_error("boom"), 500, "server_error", "internal_error"},
      {http_error(http::Status::not_found, "x"), 404, "invalid_request_error", "unknown_url"},
      {http_error(http::Status::method_not_allowed, "x"), 405, "invalid_request_error", "method_not_allowed"},
      {http_error(http::Status::request_timeout, "x"), 408, "invalid_request_error", "request_timeout"},
      {http_error(http::Status::payload_too_large, "x"), 413, "invalid_request_error", "request_too_large"},
      {http_error(http::Status::request_header_fields_too_large, "x"), 431, "invalid_request_error", "header_too_large"},
      {http_error(http::Status::bad_request, "x"), 400, "invalid_request_error", "malformed_request"},
      {http_error(http::Status::internal_server_error, "x"), 500, "server_error", "internal_error"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(int(c.e.status()), c.status) << c.e.code();
    EXPECT_EQ(c.e.type(), c.type);
    EXPECT_EQ(c.e.code(), c.code);
  }
  EXPECT_EQ(std::string(model_not_found("gpt-4").what()), "The model `gpt-4` does not exist (GET /v1/models lists the served models)");
  EXPECT_EQ(model_not_found("gpt-4").param(), "model");
}

}  // namespace
}  // namespace moe::server
