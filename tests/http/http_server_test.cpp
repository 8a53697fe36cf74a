// The HTTP server against raw sockets: keep-alive and pipelining, the errors it answers
// itself (400, 404, 405, 408, 413, 500), Server-Sent Events fed from another thread, and
// noticing a client that leaves while its handler waits. Timeouts are short here so the
// slow-client cases take a fraction of a second.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/this_coro.hpp>
#include <boost/beast/http/parser.hpp>
#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "core/error.h"
#include "http/mailbox.h"
#include "http/server.h"

namespace moe::http {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A blocking client on a plain socket, every read bounded by a deadline so a server bug
// fails the test instead of hanging it.
class RawClient {
 public:
  explicit RawClient(unsigned short port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) ADD_FAILURE() << "connect failed";
  }
  ~RawClient() { close(); }

  void send(const std::string& bytes) { ASSERT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size())); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Up to `limit` for more bytes: false on end of stream or timeout.
  bool read_some(std::chrono::milliseconds limit) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, int(limit.count())) <= 0) return false;
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    pending_.append(buf, size_t(n));
    return true;
  }

  // The next whole response (chunked bodies decoded); status 0 when none arrived in time.
  Response response(std::chrono::milliseconds limit = 5000ms) {
    beast::http::response_parser<beast::http::string_body> parser;
    parser.eager(true);
    const auto end = Clock::now() + limit;
    for (;;) {
      boost::system::error_code ec;
      if (!pending_.empty()) {
        const size_t used = parser.put(asio::buffer(pending_), ec);
        pending_.erase(0, used);
        if (ec && ec != beast::http::error::need_more) {
          ADD_FAILURE() << "unparsable response: " << ec.message();
          return Response{};
        }
        if (parser.is_done()) return parser.release();
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
      if (left.count() <= 0 || !read_some(left)) {
        if (eof_ && parser.got_some()) {
          parser.put_eof(ec);
          if (parser.is_done()) return parser.release();
        }
        return Response{};
      }
    }
  }

  // Whether the server closes the connection within `limit` (any bytes before are kept).
  bool closed_within(std::chrono::milliseconds limit) {
    const auto end = Clock::now() + limit;
    while (!eof_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
      if (left.count() <= 0) return false;
      read_some(left);
    }
    return true;
  }

  const std::string& pending() const { return pending_; }
  void drop_pending() { pending_.clear(); }

 private:
  int fd_ = -1;
  std::string pending_;
  bool eof_ = false;
};

std::string get(const std::string& path) { return "GET " + path + " HTTP/1.1\r\nHost: t\r\n\r\n"; }

Response text_error(Status status, const std::string& message) {
  Response r{status, 11};
  r.set(Field::content_type, "text/plain");
  r.body() = "error: " + message;
  return r;
}

asio::awaitable<void> reply(Exchange& ex, std::string body) {
  Response r{Status::ok, 11};
  r.body() = std::move(body);
  co_await ex.respond(std::move(r));
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    router_.add(Verb::get, "/hello", [](Exchange& ex) { return reply(ex, "hello " + std::string(ex.request().target())); });
    router_.add(Verb::post, "/echo", [](Exchange& ex) { return reply(ex, ex.request().body()); });
    router_.add(Verb::get, "/throw", [](Exchange&) -> asio::awaitable<void> {
      throw std::runtime_error("handler failed");
      co_return;
    });
    config_.port = 0;
    config_.max_body_bytes = 1024;
    config_.idle_timeout = 2000ms;
    config_.header_timeout = 300ms;
    config_.body_timeout = 300ms;
  }

  void start() {
    server_ = std::make_unique<HttpServer>(config_, router_, text_error);
    server_->start();
  }
  unsigned short port() const { return server_->port(); }

  Router router_;
  ServerConfig config_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, KeepAliveAndPipelining) {
  start();
  RawClient c(port());
  c.send(get("/hello?x=1"));
  Response r = c.response();
  EXPECT_EQ(r.result(), Status::ok);
  EXPECT_EQ(r.body(), "hello /hello?x=1");
  EXPECT_EQ(r[Field::server], "moengine");
  // Two requests in one write are answered in order on the same connection.
  c.send(get("/hello?a") + "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nabcde");
  EXPECT_EQ(c.response().body(), "hello /hello?a");
  EXPECT_EQ(c.response().body(), "abcde");
}

TEST_F(HttpServerTest, ClientClosingAfterItsAnswerIsTidiedUp) {
  start();
  {
    RawClient c(port());
    c.send(get("/hello"));
    EXPECT_EQ(c.response().result(), Status::ok);
  }
  std::this_thread::sleep_for(100ms);
  RawClient d(port());
  d.send(get("/hello"));
  EXPECT_EQ(d.response().result(), Status::ok);
}

TEST_F(HttpServerTest, ManyClientsOnSeveralIoThreads) {
  config_.io_threads = 3;
  start();
  std::vector<std::thread> clients;
  std::atomic<int> answered{0};
  for (int i = 0; i < 16; ++i) {
    clients.emplace_back([&, i] {
      RawClient c(port());
      for (int j = 0; j < 20; ++j) {
        const std::string body = std::to_string(i) + "-" + std::to_string(j);
        c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
        if (c.response().body() == body) ++answered;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(answered.load(), 16 * 20);
}

TEST_F(HttpServerTest, UnknownRouteIs404AndWrongMethodIs405WithAllow) {
  start();
  RawClient c(port());
  c.send(get("/nope"));
  Response r = c.response();
  EXPECT_EQ(r.result(), Status::not_found);
  EXPECT_EQ(r.body(), "error: no route for GET /nope");
  c.send("DELETE /hello HTTP/1.1\r\nHost: t\r\n\r\n");
  r = c.response();
  EXPECT_EQ(r.result(), Status::method_not_allowed);
  EXPECT_EQ(r[Field::allow], "GET");
  EXPECT_EQ(r.body(), "error: method DELETE is not allowed for /hello; allowed: GET");
  // Both leave the connection usable.
  c.send(get("/hello"));
  EXPECT_EQ(c.response().result(), Status::ok);
}

TEST_F(HttpServerTest, HandlerExceptionIs500) {
  start();
  RawClient c(port());
  c.send(get("/throw"));
  const Response r = c.response();
  EXPECT_EQ(r.result(), Status::internal_server_error);
  EXPECT_EQ(r.body(), "error: handler failed");
}

TEST_F(HttpServerTest, DeclaredBodyOverTheLimitIs413AndTheAnswerArrives) {
  start();
  RawClient c(port());
  c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n" + std::string(5000, 'x'));
  const Response r = c.response();
  EXPECT_EQ(r.result(), Status::payload_too_large);
  EXPECT_EQ(r.body(), "error: the request body (5000 bytes) is larger than the limit of 1024 bytes");
  EXPECT_TRUE(c.closed_within(3000ms));
}

TEST_F(HttpServerTest, ChunkedBodyOverTheLimitIs413) {
  start();
  RawClient c(port());
  c.send("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" + std::string(0x800, 'y') + "\r\n0\r\n\r\n");
  const Response r = c.response();
  EXPECT_EQ(r.result(), Status::payload_too_large);
  EXPECT_EQ(r.body(), "error: the request body is larger than the limit of 1024 bytes");
}

TEST_F(HttpServerTest, SlowHeaderIs408WhileOthersAreServed) {
  start();
  RawClient slow(port());
  slow.send("GET /hello HTTP/1.1\r\nHost: t\r\n");
  RawClient fast(port());
  const auto t0 = Clock::now();
  fast.send(get("/hello"));
  EXPECT_EQ(fast.response().result(), Status::ok);
  EXPECT_LT(Clock::now() - t0, 250ms);
  const Response r = slow.response(3000ms);
  EXPECT_EQ(r.result(), Status::request_timeout);
  EXPECT_EQ(r.body(), "error: the request header did not arrive within 300 ms");
  EXPECT_TRUE(slow.closed_within(3000ms));
}

TEST_F(HttpServerTest, HalfSentBodyIs408) {
  start();
  RawClient c(port());
  c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n0123456789");
  const Response r = c.response(3000ms);
  EXPECT_EQ(r.result(), Status::request_timeout);
  EXPECT_EQ(r.body(), "error: the request body did not arrive within 300 ms");
  EXPECT_TRUE(c.closed_within(3000ms));
}

TEST_F(HttpServerTest, IdleConnectionIsClosedQuietly) {
  config_.idle_timeout = 200ms;
  start();
  RawClient c(port());
  c.send(get("/hello"));
  EXPECT_EQ(c.response().result(), Status::ok);
  EXPECT_TRUE(c.closed_within(3000ms));
  EXPECT_EQ(c.pending(), "");
}

TEST_F(HttpServerTest, MalformedRequestIs400) {
  start();
  RawClient c(port());
  c.send("THIS IS NOT HTTP\r\n\r\n");
  const Response r = c.response();
  EXPECT_EQ(r.result(), Status::bad_request);
  EXPECT_EQ(std::string(r.body()).rfind("error: malformed HTTP request: ", 0), 0u) << r.body();
  EXPECT_TRUE(c.closed_within(3000ms));
}

TEST_F(HttpServerTest, OversizedHeaderIs431) {
  config_.max_header_bytes = 256;
  start();
  RawClient c(port());
  c.send("GET /hello HTTP/1.1\r\nHost: t\r\nX-Big: " + std::string(1000, 'h') + "\r\n\r\n");
  const Response r = c.response();
  EXPECT_EQ(r.result(), Status::request_header_fields_too_large);
  EXPECT_EQ(r.body(), "error: the request header is larger than 256 bytes");
}

TEST_F(HttpServerTest, ExpectContinueGetsAnInterimResponse) {
  start();
  RawClient c(port());
  c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n");
  ASSERT_TRUE(c.read_some(2000ms));
  EXPECT_EQ(c.pending(), "HTTP/1.1 100 Continue\r\n\r\n");
  c.drop_pending();
  c.send("abc");
  EXPECT_EQ(c.response().body(), "abc");
}

// A producer thread feeds the handler's mailbox; the handler streams what arrives.
TEST_F(HttpServerTest, EventsFromAnotherThreadAreStreamed) {
  router_.add(Verb::get, "/events", [](Exchange& ex) -> asio::awaitable<void> {
    auto box = std::make_shared<Mailbox<std::string>>(co_await asio::this_coro::executor);
    std::thread producer([box] {
      for (const char* s : {"one", "two", "three"}) {
        std::this_thread::sleep_for(20ms);
        box->push(s);
      }
    });
    producer.detach();
    if (!co_await ex.start_events()) co_return;
    int got = 0;
    while (got < 3) {
      auto batch = co_await ex.unless_client_gone(box->receive());
      if (!batch) co_return;
      got += int(batch->size());
      if (!co_await ex.send_events(*batch)) co_return;
    }
    co_await ex.send_event("[DONE]");
    co_await ex.end_events();
  });
  start();
  RawClient c(port());
  c.send(get("/events"));
  const Response r = c.response();
  EXPECT_EQ(r.result(), Status::ok);
  EXPECT_EQ(r[Field::content_type], "text/event-stream");
  EXPECT_TRUE(r.chunked());
  EXPECT_EQ(r.body(), "data: one\n\ndata: two\n\ndata: three\n\ndata: [DONE]\n\n");
  c.send(get("/hello"));
  EXPECT_EQ(c.response().body(), "hello /hello");
}

// The handler waits on a mailbox nobody fills: only the client leaving can end the wait.
struct Waiter {
  std::promise<bool> outcome;  // true: the wait ended because the client left
  std::promise<std::shared_ptr<Mailbox<std::string>>> box;
};

Handler waiting_handler(Waiter& w, bool streaming) {
  return [&w, streaming](Exchange& ex) -> asio::awaitable<void> {
    auto box = std::make_shared<Mailbox<std::string>>(co_await asio::this_coro::executor);
    w.box.set_value(box);
    if (streaming && !co_await ex.start_events()) co_return;
    auto r = co_await ex.unless_client_gone(box->receive());
    w.outcome.set_value(!r.has_value());
    box->close();
    if (!r) co_return;
    if (streaming) {
      co_await ex.send_events(*r);
      co_await ex.end_events();
    } else {
      co_await reply(ex, r->front());
    }
  };
}

TEST_F(HttpServerTest, ClientLeavingWhileItsRequestWaitsIsNoticed) {
  Waiter w;
  router_.add(Verb::get, "/wait", waiting_handler(w, false));
  start();
  RawClient c(port());
  c.send(get("/wait"));
  auto f = w.outcome.get_future();
  EXPECT_EQ(f.wait_for(200ms), std::future_status::timeout);
  c.close();
  ASSERT_EQ(f.wait_for(3s), std::future_status::ready);
  EXPECT_TRUE(f.get());
}

TEST_F(HttpServerTest, ClientLeavingMidStreamIsNoticed) {
  Waiter w;
  router_.add(Verb::get, "/wait", waiting_handler(w, true));
  start();
  RawClient c(port());
  c.send(get("/wait"));
  ASSERT_TRUE(c.read_some(2000ms));  // the event stream's header
  c.close();
  auto f = w.outcome.get_future();
  ASSERT_EQ(f.wait_for(3s), std::future_status::ready);
  EXPECT_TRUE(f.get());
}

TEST_F(HttpServerTest, PipelinedRequestIsNotTakenForADisconnect) {
  Waiter w;
  router_.add(Verb::get, "/wait", waiting_handler(w, false));
  start();
  RawClient c(port());
  c.send(get("/wait") + get("/hello"));
  auto box = w.box.get_future().get();
  auto f = w.outcome.get_future();
  EXPECT_EQ(f.wait_for(300ms), std::future_status::timeout);
  box->push("done");
  ASSERT_EQ(f.wait_for(3s), std::future_status::ready);
  EXPECT_FALSE(f.get());
  EXPECT_EQ(c.response().body(), "done");
  EXPECT_EQ(c.response().body(), "hello /hello");
}

TEST_F(HttpServerTest, StopEndsWaitingHandlersAndReturns) {
  Waiter w;
  router_.add(Verb::get, "/wait", waiting_handler(w, true));
  start();
  RawClient c(port());
  c.send(get("/wait"));
  w.box.get_future().get();
  const auto t0 = Clock::now();
  server_->stop();
  EXPECT_LT(Clock::now() - t0, 3s);
  auto f = w.outcome.get_future();
  ASSERT_EQ(f.wait_for(0ms), std::future_status::ready);
  EXPECT_TRUE(f.get());
  EXPECT_TRUE(c.closed_within(1000ms));
}

TEST_F(HttpServerTest, PortInUseIsAClearError) {
  start();
  ServerConfig again = config_;
  again.port = port();
  HttpServer second(again, router_, text_error);
  try {
    second.start();
    ADD_FAILURE() << "a second server bound the same port";
  } catch (const moe::Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot listen on 127.0.0.1:" + std::to_string(port()) + ": Address already in use");
  }
}

TEST(Mailbox, PushesAfterCloseAreDropped) {
  asio::io_context ioc;
  auto box = std::make_shared<Mailbox<int>>(ioc.get_executor());
  EXPECT_TRUE(box->push(1));
  box->close();
  EXPECT_FALSE(box->push(2));
}

}  // namespace
}  // namespace moe::http
