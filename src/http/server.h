#pragma once
// The HTTP/1.1 server: a listener and one coroutine per connection (keep-alive, pipelining),
// run by a few I/O threads, each with its own io_context. A connection stays on the thread
// that accepted it, so a handler never races itself and its wake-ups (the client's bytes,
// its upstream calls' answers) need no hand-off between threads; a slow or stuck client
// holds only its own coroutine. Per request it enforces the
// header and body deadlines (408), the header and body size limits (431, 413), and answers
// malformed HTTP (400), unknown routes (404) and wrong methods (405) itself, through the
// application's ErrorResponder, before any handler runs.
#include <boost/asio/io_context.hpp>
#include <condition_variable>
#include <memory>
#include <cstdint>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "http/router.h"
#include "http/types.h"

namespace moe::http {

class HttpServer {
 public:
  HttpServer(ServerConfig config, Router router, ErrorResponder errors);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens (throws moe::Error naming the address when it cannot), then starts the
  // I/O threads.
  void start();
  // The port listened on: the configured one, or the one the system chose for port 0.
  unsigned short port() const { return port_; }
  // Stops accepting, closes every connection (handlers waiting on one see their client
  // gone), waits a few seconds for the handlers to return, and joins the I/O threads.
  void stop();

 private:
  asio::awaitable<void> accept_loop();
  asio::awaitable<void> session(tcp::socket socket);
  asio::awaitable<void> dispatch(Exchange& exchange);
  // Answers an error the request cannot get through an Exchange (it was never read whole),
  // then closes the connection without losing the answer to unread request bytes.
  asio::awaitable<void> reject(tcp::socket& socket, Status status, const std::string& message);

  uint64_t add_connection(tcp::socket& socket);
  void remove_connection(uint64_t id);

  ServerConfig config_;
  Router router_;
  ErrorResponder errors_;
  // One per I/O thread; new connections go to them in turn.
  std::vector<std::unique_ptr<asio::io_context>> contexts_;
  size_t next_context_ = 0;  // the acceptor's
  tcp::acceptor acceptor_;   // on contexts_[0]
  unsigned short port_ = 0;
  std::vector<std::thread> threads_;

  std::mutex mu_;
  std::condition_variable idle_;
  bool stopping_ = false;
  bool accepting_ = false;
  uint64_t next_connection_ = 0;
  std::unordered_map<uint64_t, tcp::socket*> connections_;  // each one touched on its own thread
};

}  // namespace moe::http
