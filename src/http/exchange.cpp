#include "http/exchange.h"

#include <sys/socket.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/write.hpp>
#include <cerrno>
#include <sstream>
#include <fmt/format.h>

#include "http/deadline.h"

namespace moe::http {

namespace bhttp = beast::http;
using asio::as_tuple;
using asio::use_awaitable;

Exchange::Exchange(tcp::socket& socket, Request request, const ServerConfig& config)
    : socket_(socket), request_(std::move(request)), config_(config), chunked_(request_.version() >= 11) {}

std::string_view Exchange::path() const {
  std::string_view target = request_.target();
  return target.substr(0, target.find('?'));
}

bool Exchange::reusable() const { return state_ == State::kDone && !client_gone_ && keep_alive_; }

template <class Op>
asio::awaitable<bool> Exchange::timed_write(Op op) {
  if (client_gone_) co_return false;
  auto r = co_await within(config_.write_timeout, op());
  if (r && !std::get<0>(*r)) co_return true;
  // A failed write leaves the stream in an unknown state, and a client that stopped reading
  // for this long is treated as gone so that its work is cancelled.
  client_gone_ = true;
  co_return false;
}

asio::awaitable<void> Exchange::respond(Response response) {
  if (state_ != State::kNone) throw std::logic_error("Exchange::respond: a response was already started");
  state_ = State::kDone;
  status_ = int(response.result_int());
  keep_alive_ = request_.keep_alive() && response.keep_alive();
  response.version(request_.version());
  response.keep_alive(keep_alive_);
  response.set(Field::server, "moengine");
  response.prepare_payload();
  std::ostringstream wire;
  wire << response;
  co_await write_soon(wire.view());
}

asio::awaitable<bool> Exchange::start_events() {
  if (state_ != State::kNone) throw std::logic_error("Exchange::start_events: a response was already started");
  state_ = State::kStreaming;
  status_ = 200;
  bhttp::response<bhttp::empty_body> head{Status::ok, request_.version()};
  head.set(Field::server, "moengine");
  head.set(Field::content_type, "text/event-stream");
  head.set(Field::cache_control, "no-cache");
  // HTTP/1.0 has no chunked encoding: there the end of the connection ends the stream.
  keep_alive_ = chunked_ && request_.keep_alive();
  head.keep_alive(keep_alive_);
  head.chunked(chunked_);
  bhttp::response_serializer<bhttp::empty_body> sr{head};
  co_return co_await timed_write([&] { return bhttp::async_write_header(socket_, sr, as_tuple(use_awaitable)); });
}

asio::awaitable<bool> Exchange::send_event(std::string_view data) {
  const std::vector<std::string> one{std::string(data)};
  co_return co_await send_events(one);
}

asio::awaitable<bool> Exchange::send_events(const std::vector<std::string>& data) {
  if (state_ != State::kStreaming) throw std::logic_error("Exchange::send_events: the event stream is not open");
  if (data.empty()) co_return !client_gone_;
  size_t size = 0;
  for (const std::string& d : data) size += d.size() + 8;
  std::string wire = chunked_ ? fmt::format("{:x}\r\n", size) : std::string();
  wire.reserve(wire.size() + size + 2);
  for (const std::string& d : data) wire.append("data: ").append(d).append("\n\n");
  if (chunked_) wire.append("\r\n");
  co_return co_await write_soon(wire);
}

asio::awaitable<bool> Exchange::write_soon(std::string_view bytes) {
  // Events are small and the client reads them as they come, so the socket's send buffer
  // almost always takes them whole at once: then no timed asynchronous write is set up.
  size_t done = 0;
  if (!client_gone_) {
    const ssize_t n = ::send(socket_.native_handle(), bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) done = size_t(n);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) client_gone_ = true;
  }
  bool sent = !client_gone_;
  if (sent && done < bytes.size()) {
    const std::string_view rest = bytes.substr(done);
    sent = co_await timed_write([&] { return asio::async_write(socket_, asio::buffer(rest.data(), rest.size()), as_tuple(use_awaitable)); });
  }
  co_return sent;
}

asio::awaitable<bool> Exchange::end_events() {
  if (state_ != State::kStreaming) throw std::logic_error("Exchange::end_events: the event stream is not open");
  state_ = State::kDone;
  if (!chunked_) co_return !client_gone_;
  co_return co_await timed_write([&] { return asio::async_write(socket_, bhttp::make_chunk_last(), as_tuple(use_awaitable)); });
}

asio::awaitable<void> Exchange::watch_for_disconnect() {
  for (;;) {
    auto [ec] = co_await socket_.async_wait(tcp::socket::wait_read, as_tuple(use_awaitable));
    if (ec) co_return;
    // Readable: either the peer closed (a peek reads end-of-file or an error) or it sent more
    // bytes, the start of its next request. Peeking leaves those bytes for the parser. The
    // peek must not block: the readiness can be stale (reported for bytes the parser has
    // already read), and a blocking peek would then hold this I/O thread, and every
    // connection on it, until the client sent or closed.
    char byte;
    const ssize_t n = ::recv(socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    if (n <= 0) co_return;
    // The client is alive, and the socket stays readable until its bytes are parsed, so
    // waiting again would spin: from here only a failed write can tell that it left.
    asio::steady_timer forever(socket_.get_executor(), asio::steady_timer::time_point::max());
    co_await forever.async_wait(as_tuple(use_awaitable));
    co_return;
  }
}

}  // namespace moe::http
