#pragma once
// One request and its response on a connection, as a handler sees it: send a whole
// response, or stream Server-Sent Events; and learn at once when the client goes away while
// the handler waits for something else (an engine's output), so it can stop that work.
//
// Everything here runs on the connection's executor; an Exchange is never shared between
// threads. Writes never throw: a failed or timed-out write marks the client gone.
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "http/types.h"

namespace moe::http {

class Exchange {
 public:
  Exchange(tcp::socket& socket, Request request, const ServerConfig& config);

  const Request& request() const { return request_; }
  // The request target without its query string.
  std::string_view path() const;

  // Sends a whole response (Content-Length set here, keep-alive as the request asks).
  asio::awaitable<void> respond(Response response);

  // Streams: the status line and headers of a chunked text/event-stream response, then one
  // event per call ("data: <data>\n\n"), then the end of the stream. Each returns false when
  // the client is gone (the rest of the stream should be abandoned).
  asio::awaitable<bool> start_events();
  asio::awaitable<bool> send_event(std::string_view data);
  // Several events in one write (nothing is written for none).
  asio::awaitable<bool> send_events(const std::vector<std::string>& data);
  asio::awaitable<bool> end_events();

  // For a handler that cannot finish its response (an error in the middle of a stream):
  // the connection is closed after the handler returns rather than reused.
  void abandon() { keep_alive_ = false; }

  // Runs op to completion unless the client closes its connection first; then op is
  // cancelled and the result is nullopt. Bytes the client sends meanwhile (a pipelined
  // request) stay unread for the connection to parse next.
  template <class T>
  asio::awaitable<std::optional<T>> unless_client_gone(asio::awaitable<T> op) {
    using namespace asio::experimental::awaitable_operators;
    if (client_gone_) co_return std::nullopt;
    std::variant<T, std::monostate> r = co_await (std::move(op) || watch_for_disconnect());
    if (r.index() == 0) co_return std::get<0>(std::move(r));
    client_gone_ = true;
    co_return std::nullopt;
  }

  bool responded() const { return state_ != State::kNone; }
  // The status sent (200 for a stream); 0 before any.
  int status() const { return status_; }
  bool client_gone() const { return client_gone_; }
  // Whether the connection can carry another request after this one.
  bool reusable() const;

 private:
  enum class State { kNone, kStreaming, kDone };

  // Completes when the peer has closed (or reset) the connection.
  asio::awaitable<void> watch_for_disconnect();
  template <class Op>
  asio::awaitable<bool> timed_write(Op op);
  // At once if the socket takes it all, else the rest in a timed write. False when the
  // client is gone.
  asio::awaitable<bool> write_soon(std::string_view bytes);

  tcp::socket& socket_;
  Request request_;
  const ServerConfig& config_;
  State state_ = State::kNone;
  int status_ = 0;
  bool chunked_;
  bool client_gone_ = false;
  bool keep_alive_ = true;
};

}  // namespace moe::http
