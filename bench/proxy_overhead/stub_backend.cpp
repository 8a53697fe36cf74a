#include "stub_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "http/api_error.h"

namespace moe::bench {

namespace {

using Json = nlohmann::json;

constexpr int32_t kFirstTokenId = 1000;

std::string token_text(int i) { return fmt::format(" tok{}", i); }

std::string text_of(int from, int to) {
  std::string s;
  for (int i = from; i < to; ++i) s += token_text(i);
  return s;
}

std::string id_list(int from, int to) {
  std::string s = "[";
  for (int i = from; i < to; ++i) s += fmt::format("{}{}", i == from ? "" : ",", kFirstTokenId + i);
  return s + "]";
}

// What one request asks of the stub.
struct Ask {
  enum class Leg { kWhole, kPrefill, kDecode } leg = Leg::kWhole;
  bool stream = false;
  bool token_ids = false;      // return_token_ids: every choice names its tokens' ids
  bool include_usage = false;  // stream_options.include_usage
  bool hand_off = true;        // a prefill leg with max_tokens > 1 has a decode leg to hand off to
  int prompt_tokens = 1;
};

bool flag(const Json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

// Throws http::ApiError for a body that is not a completion request.
Ask read_ask(const std::string& body) {
  const Json j = Json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw http::invalid_json("the request body is not a JSON object");
  const auto prompt = j.find("prompt");
  if (prompt == j.end() || !prompt->is_string()) throw http::unsupported("prompt", "the stub takes one prompt string");
  Ask a;
  a.prompt_tokens = std::max<int>(1, int(prompt->get_ref<const std::string&>().size() / 4));
  a.stream = flag(j, "stream");
  a.token_ids = flag(j, "return_token_ids");
  if (const auto so = j.find("stream_options"); so != j.end() && so->is_object()) a.include_usage = flag(*so, "include_usage");
  if (const auto kv = j.find("kv_transfer_params"); kv != j.end() && kv->is_object()) {
    if (flag(*kv, "do_remote_decode")) a.leg = Ask::Leg::kPrefill;
    if (flag(*kv, "do_remote_prefill")) a.leg = Ask::Leg::kDecode;
  }
  const auto max_tokens = j.find("max_tokens");
  a.hand_off = max_tokens == j.end() || !max_tokens->is_number_integer() || max_tokens->get<int64_t>() > 1;
  return a;
}

// A prefill instance's hand-off, as `moengine serve --role prefill` writes it.
std::string handoff(const Ask& a, unsigned short port, uint64_t request) {
  std::string prompt_ids = "[";
  for (int i = 0; i < a.prompt_tokens; ++i) prompt_ids += fmt::format("{}{}", i ? "," : "", i);
  prompt_ids += "]";
  std::string blocks = "[";
  for (int i = 0; i <= a.prompt_tokens / 16; ++i) blocks += fmt::format("{}{}", i ? "," : "", i);
  blocks += "]";
  return fmt::format(
      R"({{"do_remote_prefill":true,"do_remote_decode":false,"remote_engine_id":"stub","remote_host":"127.0.0.1",)"
      R"("remote_port":{},"remote_block_ids":{},"remote_request_id":"stub-{}","lease_ms":30000,)"
      R"("prompt_token_ids":{},"first_token_id":{},"prompt_cached_tokens":0}})",
      port, blocks, request, prompt_ids, kFirstTokenId);
}

constexpr const char* kHead = R"({"id":"cmpl-stub","object":"text_completion","created":1,"model":"stub",)";

std::string usage(int prompt, int completion) {
  return fmt::format(R"("usage":{{"prompt_tokens":{},"completion_tokens":{},"total_tokens":{}}})", prompt, completion,
                     prompt + completion);
}

std::string ids_member(const Ask& a, int from, int to) { return a.token_ids ? R"(,"token_ids":)" + id_list(from, to) : ""; }

std::string kv_member(const std::string& kv) { return kv.empty() ? "" : R"(,"kv_transfer_params":)" + kv; }

// The answer for tokens [from, to) of the whole answer; `completion` is what usage counts.
std::string whole_answer(const Ask& a, int from, int to, int completion, const std::string& kv) {
  return fmt::format(
      R"({}"choices":[{{"index":0,"text":"{}","logprobs":null,"finish_reason":"length","stop_reason":null{}}}],{}{}}})", kHead,
      text_of(from, to), ids_member(a, from, to), usage(a.prompt_tokens, completion), kv_member(kv));
}

std::vector<std::string> events(const Ask& a, int from, int to, int completion, const std::string& kv) {
  std::vector<std::string> out;
  for (int i = from; i < to; ++i) {
    out.push_back(fmt::format(R"({}"choices":[{{"index":0,"text":"{}","logprobs":null,"finish_reason":null{}}}]}})", kHead,
                              token_text(i), ids_member(a, i, i + 1)));
  }
  out.push_back(fmt::format(
      R"({}"choices":[{{"index":0,"text":"","logprobs":null,"finish_reason":"length","stop_reason":null{}}}]{}}})", kHead,
      ids_member(a, 0, 0), kv_member(kv)));
  if (a.include_usage) out.push_back(fmt::format(R"({}"choices":[],{}}})", kHead, usage(a.prompt_tokens, completion)));
  out.push_back("[DONE]");
  return out;
}

// `body` by value: a route's lambda returns this coroutine unstarted, so a reference
// parameter would outlive a temporary it was given.
http::asio::awaitable<void> respond_json(http::Exchange& ex, std::string body) {
  http::Response res{http::Status::ok, 11};
  res.set(http::Field::content_type, "application/json");
  res.body() = std::move(body);
  co_await ex.respond(std::move(res));
}

}  // namespace

StubBackend::StubBackend(StubConfig config) : config_(config) {
  if (config_.output_tokens < 2) {
    fail("the stub's answers need at least 2 tokens (one for P, the rest for D), got {}", config_.output_tokens);
  }
  http::Router r;
  r.add(http::Verb::post, "/v1/completions", [this](http::Exchange& ex) { return completions(ex); });
  r.add(http::Verb::get, "/health", [](http::Exchange& ex) { return respond_json(ex, R"({"status":"ok"})"); });
  r.add(http::Verb::post, "/internal/kv/release", [](http::Exchange& ex) { return respond_json(ex, "{}"); });
  http::ServerConfig sc;
  sc.port = 0;
  sc.io_threads = config_.io_threads;
  server_ = std::make_unique<http::HttpServer>(
      sc, std::move(r), [](http::Status s, const std::string& m) { return http::error_response(http::http_error(s, m)); });
  server_->start();
}

StubBackend::~StubBackend() { server_->stop(); }

std::string StubBackend::expected_text() const { return text_of(0, config_.output_tokens); }

http::asio::awaitable<void> StubBackend::completions(http::Exchange& ex) {
  Ask a;
  std::optional<http::Response> refused;
  try {
    a = read_ask(ex.request().body());
  } catch (const http::ApiError& e) {
    refused = http::error_response(e);
  }
  if (refused) {
    co_await ex.respond(std::move(*refused));
    co_return;
  }
  const int n = config_.output_tokens;
  // [from, to) of the answer's tokens, what usage counts, and the hand-off.
  int from = 0, to = n, completion = n;
  std::string kv;
  switch (a.leg) {
    case Ask::Leg::kWhole: ++whole_; break;
    case Ask::Leg::kPrefill: {
      const uint64_t request = ++prefill_;
      to = completion = 1;
      kv = a.hand_off ? handoff(a, port(), request) : "null";
      break;
    }
    case Ask::Leg::kDecode: ++decode_; from = 1; break;
  }
  if (!a.stream) {
    co_await respond_json(ex, whole_answer(a, from, to, completion, kv));
    co_return;
  }
  if (co_await ex.start_events() && co_await ex.send_events(events(a, from, to, completion, kv))) co_await ex.end_events();
}

}  // namespace moe::bench
