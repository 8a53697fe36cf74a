#include "http/http_client.h"

#include <sys/socket.h>

#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <mutex>
#include <optional>
#include <sstream>

#include "http/connection_pool.h"

namespace moe::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

// Raised on a reused connection that the server had closed before our request reached
// it; the request is then sent again on a fresh connection.
struct StaleConnection {};

bool closed_by_peer(const beast::error_code& ec) {
  return ec == asio::error::eof || ec == http::error::end_of_stream || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == asio::error::connection_aborted;
}

std::string describe(const beast::error_code& ec, std::chrono::milliseconds timeout) {
  if (ec == beast::error::timeout) return fmt::format("no data for {:.0f} s (timed out)", timeout.count() / 1e3);
  return ec.message();
}

}  // namespace

std::string Url::str() const { return fmt::format("http://{}:{}{}", host, port, path); }

Url parse_url(std::string_view url) {
  constexpr std::string_view scheme = "http://";
  if (url.starts_with("https://")) fail("'{}': https is not supported; use plain http://", url);
  if (!url.starts_with(scheme)) fail("'{}' is not a URL of the form http://HOST[:PORT][/PATH]", url);
  std::string_view rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  Url u;
  if (slash != std::string_view::npos) u.path = rest.substr(slash);
  while (u.path.ends_with('/')) u.path.pop_back();
  if (authority.starts_with('[')) {  // [IPv6]:port
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) fail("'{}': unterminated IPv6 address", url);
    u.host = authority.substr(1, close - 1);
    authority.remove_prefix(close + 1);
    if (!authority.empty() && !authority.starts_with(':')) fail("'{}': unexpected text after the IPv6 address", url);
    if (!authority.empty()) u.port = authority.substr(1);
  } else {
    const size_t colon = authority.find(':');
    u.host = authority.substr(0, colon);
    if (colon != std::string_view::npos) u.port = authority.substr(colon + 1);
  }
  if (u.host.empty()) fail("'{}' has no host name", url);
  if (u.port.empty()) u.port = "80";
  if (u.port.find_first_not_of("0123456789") != std::string::npos || u.port.size() > 5 || std::stoi(u.port) == 0 ||
      std::stoi(u.port) > 65535)
    fail("'{}': the port must be a number from 1 to 65535", url);
  return u;
}

struct HttpClient::Impl {
  Url base;
  HttpClientOptions options;
  std::shared_ptr<ConnectionPool> pool;
  std::mutex mutex;  // guards endpoints
  std::optional<tcp::resolver::results_type> endpoints;

  asio::awaitable<std::unique_ptr<beast::tcp_stream>> connect(const asio::any_io_executor& executor) {
    std::optional<tcp::resolver::results_type> known;
    {
      std::lock_guard lock(mutex);
      known = endpoints;
    }
    if (!known) {
      tcp::resolver resolver(executor);
      auto [ec, results] = co_await resolver.async_resolve(base.host, base.port, kTuple);
      if (ec) throw ConnectError(fmt::format("cannot resolve '{}' (from {}): {}", base.host, base.str(), ec.message()));
      known = results;
      std::lock_guard lock(mutex);
      endpoints = results;
    }
    auto stream = std::make_unique<beast::tcp_stream>(executor);
    stream->expires_after(options.idle_timeout);
    auto [ec, ep] = co_await stream->async_connect(*known, kTuple);
    if (ec) throw ConnectError(fmt::format("cannot connect to {}: {}", base.str(), describe(ec, options.idle_timeout)));
    stream->socket().set_option(tcp::no_delay(true));
    co_return stream;
  }

  // `wire`: the whole request, serialized. `what` names it in errors.
  asio::awaitable<HttpResponse> exchange(beast::tcp_stream& stream, std::string_view wire, const std::string& what,
                                         const EventBatchHandler* on_events, bool reused, bool& keep) {
    // An idle or new connection almost always takes a request whole at once: then it is
    // sent without a timed asynchronous write.
    const ssize_t n = ::send(stream.socket().native_handle(), wire.data(), wire.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    beast::error_code wec;
    size_t sent = n > 0 ? size_t(n) : 0;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) wec = beast::error_code(errno, boost::system::system_category());
    if (!wec && sent < wire.size()) {
      stream.expires_after(options.idle_timeout);
      auto [ec, more] = co_await asio::async_write(stream, asio::buffer(wire.substr(sent)), kTuple);
      wec = ec;
    }
    if (wec) {
      if (reused && closed_by_peer(wec)) throw StaleConnection{};
      fail("{}: sending the request failed: {}", what, describe(wec, options.idle_timeout));
    }
    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(boost::none);
    stream.expires_after(options.idle_timeout);
    auto [hec, hn] = co_await http::async_read_header(stream, buffer, parser, kTuple);
    if (hec) {
      if (reused && closed_by_peer(hec) && buffer.size() == 0 && !parser.got_some()) throw StaleConnection{};
      fail("{}: no response: {}", what, describe(hec, options.idle_timeout));
    }
    HttpResponse response;
    const auto& head = parser.get();
    response.status = int(head.result_int());
    for (const auto& field : head) response.headers.emplace_back(field.name_string(), field.value());
    response.content_type = head[http::field::content_type];
    const bool events = on_events && response.status / 100 == 2 &&
                        std::string_view(response.content_type).starts_with("text/event-stream");
    response.streamed = events;
    SseParser sse;
    std::array<char, 16384> chunk;
    while (!parser.is_done()) {
      parser.get().body().data = chunk.data();
      parser.get().body().size = chunk.size();
      stream.expires_after(options.idle_timeout);
      auto [ec, n] = co_await http::async_read_some(stream, buffer, parser, kTuple);
      const Clock::time_point arrived = Clock::now();
      if (ec == http::error::need_buffer) ec = {};
      if (ec) fail("{}: reading the response (HTTP {}) failed: {}", what, response.status, describe(ec, options.idle_timeout));
      const std::string_view got(chunk.data(), chunk.size() - parser.get().body().size);
      if (!events) {
        response.body.append(got);
        continue;
      }
      std::vector<SseEvent> batch;
      sse.feed(got, [&](const SseEvent& e) {
        batch.push_back(e);
        return true;
      });
      if (!batch.empty() && !co_await (*on_events)(batch, arrived)) {
        keep = false;
        co_return response;
      }
    }
    keep = parser.keep_alive();
    co_return response;
  }

  asio::awaitable<HttpResponse> run(HttpRequest request, const EventBatchHandler* on_events) {
    http::request<http::string_body> msg;
    msg.method(http::string_to_verb(request.method));
    if (msg.method() == http::verb::unknown) fail("unknown HTTP method '{}'", request.method);
    msg.target(base.path + request.target);
    msg.version(11);
    const bool ipv6 = base.host.find(':') != std::string::npos;
    msg.set(http::field::host, (ipv6 ? "[" + base.host + "]" : base.host) + ":" + base.port);
    msg.set(http::field::user_agent, "moengine-bench");
    msg.set(http::field::accept, on_events ? "text/event-stream" : "*/*");
    if (!request.body.empty()) msg.set(http::field::content_type, request.content_type);
    for (const auto& [name, value] : request.headers) msg.set(name, value);
    msg.body() = std::move(request.body);
    msg.keep_alive(true);
    msg.prepare_payload();
    std::ostringstream wire;
    wire << msg;
    const std::string what = fmt::format("{} http://{}:{}{}", std::string_view(msg.method_string()), base.host, base.port,
                                         std::string_view(msg.target()));
    // A pooled connection may have been closed by the server while idle; then the request
    // is sent once more on a new connection.
    const asio::any_io_executor executor = co_await asio::this_coro::executor;
    asio::execution_context& context = asio::query(executor, asio::execution::context);
    for (bool first = true;; first = false) {
      std::unique_ptr<beast::tcp_stream> stream = first ? pool->take(context) : nullptr;
      const bool reused = stream != nullptr;
      if (!stream) stream = co_await connect(executor);
      bool keep = false;
      try {
        HttpResponse response = co_await exchange(*stream, wire.view(), what, on_events, reused, keep);
        if (keep) pool->put(std::move(stream));
        co_return response;
      } catch (const StaleConnection&) {
      }
    }
  }
};

HttpClient::HttpClient(Url base, HttpClientOptions options) : impl_(std::make_shared<Impl>()) {
  impl_->base = std::move(base);
  impl_->options = options;
  impl_->pool = std::make_shared<ConnectionPool>(options.max_idle_connections);
}

HttpClient::~HttpClient() = default;

const Url& HttpClient::base() const { return impl_->base; }

asio::awaitable<HttpResponse> HttpClient::fetch(HttpRequest request) {
  auto impl = impl_;
  co_return co_await impl->run(std::move(request), nullptr);
}

asio::awaitable<HttpResponse> HttpClient::stream(HttpRequest request, EventHandler on_event) {
  auto impl = impl_;
  const EventBatchHandler each = [&on_event](std::vector<SseEvent>& events, Clock::time_point at) -> asio::awaitable<bool> {
    bool more = true;
    for (size_t i = 0; more && i < events.size(); ++i) more = on_event(events[i], at);
    co_return more;
  };
  co_return co_await impl->run(std::move(request), &each);
}

asio::awaitable<HttpResponse> HttpClient::stream_batches(HttpRequest request, EventBatchHandler on_events) {
  auto impl = impl_;
  co_return co_await impl->run(std::move(request), &on_events);
}

}  // namespace moe::http
