#include "http/server.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <exception>

#include "core/error.h"
#include "http/deadline.h"

namespace moe::http {

namespace bhttp = beast::http;
using asio::as_tuple;
using asio::use_awaitable;
using boost::system::error_code;

namespace {

// How long a closing connection keeps reading (and discarding) what the client still sends,
// so that an error answered before the whole request was read reaches the client instead
// of being wiped out by a reset.
constexpr std::chrono::milliseconds kLinger{1000};

// Errors that only say the client went away: there is nobody left to answer.
bool peer_gone(const error_code& ec) {
  return ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::operation_aborted || ec == asio::error::broken_pipe ||
         ec == asio::error::bad_descriptor;
}

asio::awaitable<void> close_gracefully(tcp::socket& socket) {
  error_code ec;
  socket.shutdown(tcp::socket::shutdown_send, ec);
  const auto end = std::chrono::steady_clock::now() + kLinger;
  char scratch[4096];
  while (!ec) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    auto r = co_await within(left, socket.async_read_some(asio::buffer(scratch), as_tuple(use_awaitable)));
    if (!r) break;
    ec = std::get<0>(*r);
  }
  socket.close(ec);
}

}  // namespace

namespace {

std::vector<std::unique_ptr<asio::io_context>> make_contexts(int threads) {
  std::vector<std::unique_ptr<asio::io_context>> contexts;
  for (int i = 0; i < std::max(threads, 1); ++i) contexts.push_back(std::make_unique<asio::io_context>(1));
  return contexts;
}

}  // namespace

HttpServer::HttpServer(ServerConfig config, Router router, ErrorResponder errors)
    : config_(std::move(config)),
      router_(std::move(router)),
      errors_(std::move(errors)),
      contexts_(make_contexts(config_.io_threads)),
      acceptor_(*contexts_[0]) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() {
  error_code ec;
  tcp::resolver resolver(*contexts_[0]);
  const auto endpoints = resolver.resolve(config_.host, std::to_string(config_.port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) fail("cannot listen on {}:{}: the host does not resolve ({})", config_.host, config_.port, ec.message());
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail("cannot listen on {}:{}: {}", config_.host, config_.port, ec.message());
  port_ = acceptor_.local_endpoint().port();
  accepting_ = true;
  asio::co_spawn(acceptor_.get_executor(), accept_loop(), asio::detached);
  for (auto& context : contexts_) {
    threads_.emplace_back([&context] {
      const auto work = asio::make_work_guard(*context);
      context->run();
    });
  }
}

void HttpServer::stop() {
  if (threads_.empty()) return;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (const auto& [id, socket] : connections_) {
      asio::post(socket->get_executor(), [this, id = id] {
        std::lock_guard inner(mu_);
        const auto it = connections_.find(id);
        error_code ec;
        if (it != connections_.end()) it->second->close(ec);
      });
    }
  }
  asio::post(acceptor_.get_executor(), [this] {
    error_code ec;
    acceptor_.close(ec);
  });
  {
    std::unique_lock lock(mu_);
    idle_.wait_for(lock, std::chrono::seconds(10), [this] { return connections_.empty() && !accepting_; });
  }
  for (auto& context : contexts_) context->stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

uint64_t HttpServer::add_connection(tcp::socket& socket) {
  std::lock_guard lock(mu_);
  if (stopping_) return 0;
  const uint64_t id = ++next_connection_;
  connections_.emplace(id, &socket);
  return id;
}

void HttpServer::remove_connection(uint64_t id) {
  std::lock_guard lock(mu_);
  connections_.erase(id);
  idle_.notify_all();
}

asio::awaitable<void> HttpServer::accept_loop() {
  for (;;) {
    asio::io_context& context = *contexts_[next_context_++ % contexts_.size()];
    auto [ec, socket] = co_await acceptor_.async_accept(context, as_tuple(use_awaitable));
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) break;
    if (ec) {
      // Out of file descriptors and the like: pause rather than spin; connections that
      // finish free what the next accept needs.
      asio::steady_timer pause(acceptor_.get_executor(), std::chrono::milliseconds(50));
      co_await pause.async_wait(as_tuple(use_awaitable));
      continue;
    }
    error_code opt_ec;
    socket.set_option(tcp::no_delay(true), opt_ec);
    auto ex = socket.get_executor();
    asio::co_spawn(ex, session(std::move(socket)), asio::detached);
  }
  std::lock_guard lock(mu_);
  accepting_ = false;
  idle_.notify_all();
}

asio::awaitable<void> HttpServer::reject(tcp::socket& socket, Status status, const std::string& message) {
  Response res = errors_(status, message);
  res.version(11);
  res.keep_alive(false);
  res.set(Field::server, "moengine");
  res.prepare_payload();
  co_await within(config_.write_timeout, bhttp::async_write(socket, res, as_tuple(use_awaitable)));
}

asio::awaitable<void> HttpServer::dispatch(Exchange& exchange) {
  const Request& req = exchange.request();
  const Router::Match match = router_.find(req.method(), exchange.path());
  if (!match.handler) {
    Response res;
    if (match.path_known) {
      res = errors_(Status::method_not_allowed, fmt::format("method {} is not allowed for {}; allowed: {}",
                                                            std::string(req.method_string()), exchange.path(), match.allow));
      res.set(Field::allow, match.allow);
    } else {
      res = errors_(Status::not_found, fmt::format("no route for {} {}", std::string(req.method_string()), exchange.path()));
    }
    co_await exchange.respond(std::move(res));
    co_return;
  }
  std::string failure;
  try {
    co_await (*match.handler)(exchange);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (!failure.empty() && exchange.responded()) exchange.abandon();
  if (!exchange.responded()) {
    if (failure.empty()) failure = "the handler sent no response";
    co_await exchange.respond(errors_(Status::internal_server_error, failure));
  }
}

asio::awaitable<void> HttpServer::session(tcp::socket socket) {
  const uint64_t id = add_connection(socket);
  beast::flat_buffer buffer;
  while (id != 0) {
    if (buffer.size() == 0) {
      auto ready = co_await within(config_.idle_timeout, socket.async_wait(tcp::socket::wait_read, as_tuple(use_awaitable)));
      if (!ready || std::get<0>(*ready)) break;
    }
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(uint32_t(std::min<size_t>(config_.max_header_bytes, UINT32_MAX)));
    // No limit while the header is read, so a declared length over it is answered below with
    // the length in the message; the limit then bounds a chunked body as it arrives.
    parser.body_limit(boost::none);

    auto head = co_await within(config_.header_timeout, bhttp::async_read_header(socket, buffer, parser, as_tuple(use_awaitable)));
    if (!head) {
      co_await reject(socket, Status::request_timeout,
                      fmt::format("the request header did not arrive within {} ms", config_.header_timeout.count()));
      break;
    }
    if (const error_code ec = std::get<0>(*head)) {
      if (peer_gone(ec)) break;
      if (ec == bhttp::error::header_limit) {
        co_await reject(socket, Status::request_header_fields_too_large,
                        fmt::format("the request header is larger than {} bytes", config_.max_header_bytes));
      } else {
        co_await reject(socket, Status::bad_request, "malformed HTTP request: " + ec.message());
      }
      break;
    }
    const auto length = parser.content_length();
    if (length && *length > config_.max_body_bytes) {
      co_await reject(socket, Status::payload_too_large,
                      fmt::format("the request body ({} bytes) is larger than the limit of {} bytes", *length, config_.max_body_bytes));
      break;
    }
    parser.body_limit(config_.max_body_bytes);
    if (beast::iequals(parser.get()[Field::expect], "100-continue")) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      auto w = co_await within(config_.write_timeout, asio::async_write(socket, asio::buffer(kContinue), as_tuple(use_awaitable)));
      if (!w || std::get<0>(*w)) break;
    }
    if (!parser.is_done()) {
      auto body = co_await within(config_.body_timeout, bhttp::async_read(socket, buffer, parser, as_tuple(use_awaitable)));
      if (!body) {
        co_await reject(socket, Status::request_timeout,
                        fmt::format("the request body did not arrive within {} ms", config_.body_timeout.count()));
        break;
      }
      if (const error_code ec = std::get<0>(*body)) {
        if (ec == bhttp::error::body_limit) {
          co_await reject(socket, Status::payload_too_large,
                          fmt::format("the request body is larger than the limit of {} bytes", config_.max_body_bytes));
        } else if (!peer_gone(ec)) {
          co_await reject(socket, Status::bad_request, "malformed HTTP request body: " + ec.message());
        }
        break;
      }
    }

    Exchange exchange(socket, parser.release(), config_);
    co_await dispatch(exchange);
    if (!exchange.reusable()) break;
  }
  co_await close_gracefully(socket);
  if (id != 0) remove_connection(id);
}

}  // namespace moe::http
