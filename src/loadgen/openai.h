#pragma once
// The OpenAI-compatible side of a benchmark request: the JSON body sent to
// /v1/completions or /v1/chat/completions, and the reading of its streamed answer into
// the numbers a RequestResult holds.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "loadgen/dataset.h"
#include "http/http_client.h"
#include "loadgen/stats.h"

namespace moe::loadgen {

// The HTTP client the load generator drives a server with.
using http::Clock;
using http::ConnectError;
using http::HttpClient;
using http::HttpClientOptions;
using http::HttpRequest;
using http::HttpResponse;
using http::parse_url;
using http::SseEvent;
using http::Url;

enum class Endpoint { Completions, ChatCompletions };

// "/v1/completions" or "/v1/chat/completions"; throws moe::Error otherwise.
Endpoint parse_endpoint(std::string_view path);
const char* endpoint_path(Endpoint e);

struct RequestOptions {
  std::string model;
  bool ignore_eos = false;           // a vLLM / llama.cpp extension: generate max_tokens tokens
  std::optional<double> temperature;
  nlohmann::json extra_body;          // an object merged into every body (its keys win), or null
};

// Streams with usage in the last chunk (stream_options.include_usage). Token-id prompts
// go as a JSON array, which the completions endpoint accepts; the chat endpoint needs text.
nlohmann::json request_body(Endpoint e, const SampleRequest& r, const RequestOptions& o);

// Follows one streamed response and turns what it saw into a RequestResult.
class StreamRecorder {
 public:
  StreamRecorder(Endpoint e, Clock::time_point sent) : endpoint_(e), sent_(sent) {}

  // One event's data: a JSON chunk or "[DONE]". Throws moe::Error for data that is not
  // JSON and for an error object the server sent in the stream.
  void on_event(std::string_view data, Clock::time_point arrived);

  // Called when the response has ended. Timing is taken from content chunks (ones with
  // generated text), token counts from usage when the server sent it.
  RequestResult finish(Clock::time_point ended, int64_t expected_prompt_len) const;

 private:
  Endpoint endpoint_;
  Clock::time_point sent_;
  std::optional<Clock::time_point> first_content_, last_content_, first_choice_;
  RequestResult r_;
  int64_t content_chunks_ = 0;
  std::optional<int64_t> usage_prompt_, usage_completion_;
};

}  // namespace moe::loadgen
