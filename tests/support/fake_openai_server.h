#pragma once
// A small OpenAI-style streaming server for the load generator's tests, on its own thread:
// POST /v1/completions and /v1/chat/completions stream max_tokens chunks of one word each,
// `gap` apart, with a keep-alive comment, one event split across two writes, a usage
// chunk and "data: [DONE]"; model "reject" gets HTTP 400. GET /v1/models lists
// "fake-model"; other paths get 404. Counts
// connections, requests and the most streams open at once. Port 0 picks a free port.
#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

namespace moe::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

class FakeOpenAiServer {
 public:
  explicit FakeOpenAiServer(std::chrono::milliseconds gap = std::chrono::milliseconds(10), unsigned short port = 0)
      : gap_(gap), acceptor_(io_, {asio::ip::make_address("127.0.0.1"), port}) {
    port_ = acceptor_.local_endpoint().port();
    asio::co_spawn(io_, accept_loop(), asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }
  ~FakeOpenAiServer() {
    io_.stop();
    thread_.join();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // A port that was free a moment ago, for a server started later.
  static unsigned short free_port() {
    asio::io_context io;
    asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
    return a.local_endpoint().port();
  }
  int connections() const { return connections_; }
  int requests() const { return requests_; }
  int peak_streams() const { return peak_streams_; }
  // Close each connection right after its response although the response allowed
  // keep-alive, as a server does whose idle timeout ran out.
  void drop_after_response(bool on) { drop_ = on; }

 private:
  using Socket = asio::ip::tcp::socket;

  asio::awaitable<void> accept_loop() {
    for (;;) {
      Socket s = co_await acceptor_.async_accept(asio::use_awaitable);
      ++connections_;
      asio::co_spawn(io_, session(std::move(s)), asio::detached);
    }
  }

  asio::awaitable<void> session(Socket s) {
    beast::flat_buffer buffer;
    for (;;) {
      http::request<http::string_body> req;
      auto [ec, n] = co_await http::async_read(s, buffer, req, asio::as_tuple(asio::use_awaitable));
      if (ec) co_return;
      ++requests_;
      const bool ok = co_await respond(s, req);
      if (!ok || drop_ || !req.keep_alive()) {
        beast::error_code ignored;
        s.shutdown(Socket::shutdown_both, ignored);
        co_return;
      }
    }
  }

  asio::awaitable<bool> send_whole(Socket& s, http::status status, const std::string& body) {
    http::response<http::string_body> res{status, 11};
    res.set(http::field::content_type, "application/json");
    res.body() = body;
    res.prepare_payload();
    auto [ec, n] = co_await http::async_write(s, res, asio::as_tuple(asio::use_awaitable));
    co_return !ec;
  }

  asio::awaitable<bool> chunk(Socket& s, const std::string& text) {
    auto [ec, n] = co_await asio::async_write(s, http::make_chunk(asio::buffer(text)),
                                              asio::as_tuple(asio::use_awaitable));
    co_return !ec;
  }

  asio::awaitable<bool> respond(Socket& s, const http::request<http::string_body>& req) {
    if (req.target() == "/v1/models")
      co_return co_await send_whole(s, http::status::ok, R"({"object":"list","data":[{"id":"fake-model","object":"model"}]})");
    const bool chat = req.target() == "/v1/chat/completions";
    if (req.target() != "/v1/completions" && !chat) co_return co_await send_whole(s, http::status::not_found, "{}");
    const auto body = nlohmann::json::parse(req.body(), nullptr, false);
    if (body.is_discarded() || body.value("model", "") == "reject")
      co_return co_await send_whole(s, http::status::bad_request,
                                    R"({"error":{"message":"model 'reject' does not exist","code":400}})");
    const int n = body.value(chat ? "max_completion_tokens" : "max_tokens", 1);
    const auto& prompt = chat ? body["messages"][0]["content"] : body["prompt"];
    const int prompt_tokens = prompt.is_array() ? int(prompt.size()) : int(prompt.get<std::string>().size() / 4);

    http::response<http::empty_body> head{http::status::ok, 11};
    head.set(http::field::content_type, "text/event-stream");
    head.chunked(true);
    http::response_serializer<http::empty_body> sr{head};
    auto [ec, w] = co_await http::async_write_header(s, sr, asio::as_tuple(asio::use_awaitable));
    if (ec) co_return false;
    const int open = ++streams_;
    for (int seen = peak_streams_; open > seen && !peak_streams_.compare_exchange_weak(seen, open);) {
    }
    asio::steady_timer timer(io_);
    bool ok = co_await chunk(s, ": keep-alive\n\n");
    for (int i = 0; ok && i < n; ++i) {
      timer.expires_after(gap_);
      co_await timer.async_wait(asio::use_awaitable);
      const std::string word = " w" + std::to_string(i);
      const nlohmann::json c = chat ? nlohmann::json{{"choices", {{{"index", 0}, {"delta", {{"content", word}}}}}}}
                                    : nlohmann::json{{"choices", {{{"index", 0}, {"text", word}}}}};
      const std::string event = "data: " + c.dump() + "\n\n";
      if (i == 1) {  // split in the middle of the JSON
        ok = co_await chunk(s, event.substr(0, 10)) && co_await chunk(s, event.substr(10));
      } else {
        ok = co_await chunk(s, event);
      }
    }
    const nlohmann::json usage = {{"choices", nlohmann::json::array()},
                                  {"usage", {{"prompt_tokens", prompt_tokens}, {"completion_tokens", n}}}};
    ok = ok && co_await chunk(s, "data: " + usage.dump() + "\n\ndata: [DONE]\n\n");
    --streams_;
    if (!ok) co_return false;
    auto [ec2, w2] = co_await asio::async_write(s, http::make_chunk_last(), asio::as_tuple(asio::use_awaitable));
    co_return !ec2;
  }

  std::chrono::milliseconds gap_;
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  unsigned short port_ = 0;
  std::thread thread_;
  std::atomic<int> connections_{0}, requests_{0}, streams_{0}, peak_streams_{0};
  std::atomic<bool> drop_{false};
};

}  // namespace moe::testing
