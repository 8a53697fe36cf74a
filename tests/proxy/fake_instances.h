#pragma once
// Fake prefill (P) and decode (D) instances for the proxy's tests: HttpServers that answer
// the P/D protocol with canned text, whole or streamed, and record every request they get.
// P answers " A" and hands off, unless its prompt is "short" (the request ends at P:
// kv_transfer_params null) or "reject" (HTTP 400); D answers " B C", or HTTP 503 to the
// prompt "overload". A hanging D never answers: it waits for its client to leave and
// counts that. A failing instance answers /health but every completion with HTTP 500.
#include <fmt/format.h>

#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "http/server.h"
#include "proxy/proxy_server.h"

namespace moe::proxy::testing {

using namespace std::chrono_literals;

inline const std::string kHandoff =
    R"({"do_remote_prefill":true,"remote_host":"127.0.0.1","remote_port":1,"remote_block_ids":[0,1],"remote_request_id":"req-7","first_token_id":42})";
inline const std::string kReject =
    R"({"error":{"message":"bad prompt","type":"invalid_request_error","param":"prompt","code":"invalid_value"}})";
inline const std::string kOverloaded =
    R"({"error":{"message":"no KV blocks","type":"server_error","param":null,"code":"overloaded"}})";
inline const std::string kBroken =
    R"({"error":{"message":"engine failed","type":"server_error","param":null,"code":"internal_error"}})";
inline const std::string kModels = R"({"object":"list","data":[{"id":"m","object":"model"}]})";

// The start of every answer and event, up to "model": where the proxy puts its own id and
// created.
inline std::string head(bool chat, bool chunk, const std::string& id, int64_t created) {
  const char* object = chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return fmt::format(R"({{"id":"{}","object":"{}","created":{},"model":"m",)", id, object, created);
}

inline std::string whole_choice(bool chat, const std::string& text, const std::string& finish) {
  const std::string content = chat ? R"("message":{"role":"assistant","content":")" + text + R"("})" : R"("text":")" + text + '"';
  return R"("choices":[{"index":0,)" + content + R"(,"logprobs":null,"finish_reason":")" + finish + R"(","stop_reason":null}])";
}

inline std::string chunk_choice(bool chat, const std::string& text) {
  const std::string content = chat ? R"("delta":{"content":")" + text + R"("})" : R"("text":")" + text + '"';
  return R"("choices":[{"index":0,)" + content + R"(,"logprobs":null,"finish_reason":null}])";
}

inline std::string finish_choice(bool chat, const std::string& finish) {
  return std::string(R"("choices":[{"index":0,)") + (chat ? R"("delta":{})" : R"("text":"")") +
         R"(,"logprobs":null,"finish_reason":")" + finish + R"(","stop_reason":null}])";
}

inline std::string usage(int prompt, int completion) {
  return fmt::format(R"("usage":{{"prompt_tokens":{},"completion_tokens":{},"total_tokens":{}}})", prompt, completion,
                     prompt + completion);
}

inline std::string role_chunk() {
  return R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}])";
}

struct Canned {
  std::string whole;
  std::vector<std::string> events;
};

// P's answer: " A", then the hand-off `kv` ("null" when the request ends at P).
inline Canned prefill_answer(bool chat, const std::string& kv) {
  const std::string h = head(chat, false, "p", 1), c = head(chat, true, "p", 1);
  Canned a;
  a.whole = h + whole_choice(chat, " A", "length") + "," + usage(2, 1) + R"(,"kv_transfer_params":)" + kv + "}";
  if (chat) a.events.push_back(c + role_chunk() + "}");
  a.events.push_back(c + chunk_choice(chat, " A") + "}");
  a.events.push_back(c + finish_choice(chat, "length") + R"(,"kv_transfer_params":)" + kv + "}");
  a.events.push_back(c + R"("choices":[],)" + usage(2, 1) + "}");
  a.events.push_back("[DONE]");
  return a;
}

// D's answer: the continuation " B C", with the whole request's end and usage.
inline Canned decode_answer(bool chat) {
  const std::string h = head(chat, false, "d", 2), c = head(chat, true, "d", 2);
  Canned a;
  a.whole = h + whole_choice(chat, " B C", "stop") + "," + usage(2, 3) + "}";
  a.events = {c + chunk_choice(chat, " B") + "}", c + chunk_choice(chat, " C") + "}", c + finish_choice(chat, "stop") + "}",
              c + R"("choices":[],)" + usage(2, 3) + "}", "[DONE]"};
  return a;
}

struct Seen {
  std::string path, body, authorization;
};

class FakeInstance {
 public:
  enum class Kind { kPrefill, kDecode, kHangingDecode, kFailing };

  explicit FakeInstance(Kind kind) : kind_(kind) {
    http::Router r;
    using V = http::Verb;
    for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
      r.add(V::post, path, [this](http::Exchange& ex) { return generate(ex); });
    }
    r.add(V::post, "/internal/kv/release", [this](http::Exchange& ex) { return answer(ex, http::Status::ok, "{}"); });
    r.add(V::get, "/v1/models", [this](http::Exchange& ex) { return answer(ex, http::Status::ok, kModels); });
    r.add(V::get, "/health", [this](http::Exchange& ex) { return answer(ex, http::Status::ok, "{}"); });
    http::ServerConfig config;
    config.port = 0;
    server_ = std::make_unique<http::HttpServer>(config, std::move(r), &ProxyServer::http_error);
    server_->start();
  }
  ~FakeInstance() { server_->stop(); }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }
  int hung_up() const { return hung_up_; }

  // Waits (at most 5 s) until `n` requests to `path` have come; returns those there are.
  std::vector<Seen> wait_for(const std::string& path, size_t n = 1) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, 5s, [&] { return count(path) >= n; });
    std::vector<Seen> out;
    for (const Seen& s : seen_) {
      if (s.path == path) out.push_back(s);
    }
    return out;
  }
  size_t requests(const std::string& path) {
    std::lock_guard lock(mu_);
    return count(path);
  }

 private:
  size_t count(const std::string& path) const {
    size_t n = 0;
    for (const Seen& s : seen_) n += s.path == path;
    return n;
  }

  void record(const http::Exchange& ex) {
    std::lock_guard lock(mu_);
    seen_.push_back({std::string(ex.path()), ex.request().body(), std::string(ex.request()[http::Field::authorization])});
    cv_.notify_all();
  }

  // `body` by value: a route's lambda returns this coroutine unstarted, so a reference
  // parameter would outlive a temporary it was given.
  asio::awaitable<void> answer(http::Exchange& ex, http::Status status, std::string body) {
    record(ex);
    http::Response res{status, 11};
    res.set(http::Field::content_type, "application/json");
    res.body() = std::move(body);
    co_await ex.respond(std::move(res));
  }

  asio::awaitable<void> generate(http::Exchange& ex) {
    const Json body = Json::parse(ex.request().body());
    const bool chat = ex.path() == "/v1/chat/completions";
    const std::string prompt = chat ? body["messages"][0]["content"].get<std::string>() : body["prompt"].get<std::string>();
    if (kind_ == Kind::kHangingDecode) {
      record(ex);
      asio::steady_timer never(co_await asio::this_coro::executor, 5s);
      if (!co_await ex.unless_client_gone(never.async_wait(asio::as_tuple(asio::use_awaitable)))) ++hung_up_;
      co_return;
    }
    if (kind_ == Kind::kFailing) {
      co_await answer(ex, http::Status::internal_server_error, kBroken);
      co_return;
    }
    if (kind_ == Kind::kPrefill && prompt == "reject") {
      co_await answer(ex, http::Status::bad_request, kReject);
      co_return;
    }
    if (kind_ == Kind::kDecode && prompt == "overload") {
      co_await answer(ex, http::Status::service_unavailable, kOverloaded);
      co_return;
    }
    const Canned a = kind_ == Kind::kDecode ? decode_answer(chat) : prefill_answer(chat, prompt == "short" ? "null" : kHandoff);
    if (!body.value("stream", false)) {
      co_await answer(ex, http::Status::ok, a.whole);
      co_return;
    }
    record(ex);
    if (co_await ex.start_events() && co_await ex.send_events(a.events)) co_await ex.end_events();
  }

  Kind kind_;
  std::unique_ptr<http::HttpServer> server_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Seen> seen_;
  std::atomic<int> hung_up_{0};
};

}  // namespace moe::proxy::testing
