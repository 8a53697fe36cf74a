#pragma once
// Stands between a decode instance and a prefill instance's HTTP and KV (TCP transport)
// ports, so that a test can hold a KV pull in the middle: HTTP goes through untouched but
// for GET /internal/kv/info, whose KV endpoint is rewritten to point here; the KV bytes
// from P trickle through in 4 KiB pieces, `gap` apart. Blocking sockets, a thread per
// direction of each connection; everything closes and joins when the relay goes.
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace moe::testing {

class ThrottledKvRelay {
 public:
  using tcp = boost::asio::ip::tcp;

  ThrottledKvRelay(uint16_t prefill_http_port, std::chrono::milliseconds gap)
      : upstream_http_(prefill_http_port), gap_(gap) {
    http_.listen();
    kv_.listen();
    threads_.emplace_back([this] { accept_loop(http_, [this](tcp::socket s) { relay_http(std::move(s)); }); });
    threads_.emplace_back([this] { accept_loop(kv_, [this](tcp::socket s) { relay_kv(std::move(s)); }); });
  }

  ~ThrottledKvRelay() {
    stopping_ = true;
    // shutdown, not close: it wakes a thread blocked in accept or read.
    ::shutdown(http_.acceptor.native_handle(), SHUT_RDWR);
    ::shutdown(kv_.acceptor.native_handle(), SHUT_RDWR);
    boost::system::error_code ignored;
    {
      std::lock_guard lock(mutex_);
      for (const auto& s : sockets_) s->shutdown(tcp::socket::shutdown_both, ignored);
    }
    for (;;) {
      std::vector<std::thread> threads;
      {
        std::lock_guard lock(mutex_);
        threads.swap(threads_);
      }
      if (threads.empty()) break;
      for (std::thread& t : threads) t.join();
    }
  }

  uint16_t http_port() const { return http_.acceptor.local_endpoint().port(); }
  // KV bytes passed on to the reader so far.
  uint64_t kv_bytes() const { return kv_bytes_; }

 private:
  struct Listener {
    explicit Listener(boost::asio::io_context& io) : acceptor(io) {}
    void listen() {
      const tcp::endpoint at(boost::asio::ip::make_address("127.0.0.1"), 0);
      acceptor.open(at.protocol());
      acceptor.bind(at);
      acceptor.listen();
    }
    tcp::acceptor acceptor;
  };

  template <typename Serve>
  void accept_loop(Listener& l, Serve serve) {
    while (!stopping_) {
      boost::system::error_code ec;
      tcp::socket s(io_);
      l.acceptor.accept(s, ec);
      if (ec) return;
      std::lock_guard lock(mutex_);
      threads_.emplace_back([serve, socket = std::make_shared<tcp::socket>(std::move(s))]() mutable {
        serve(std::move(*socket));
      });
    }
  }

  std::shared_ptr<tcp::socket> connect(uint16_t port) {
    auto s = std::make_shared<tcp::socket>(io_);
    boost::system::error_code ec;
    s->connect({boost::asio::ip::make_address("127.0.0.1"), port}, ec);
    std::lock_guard lock(mutex_);
    sockets_.push_back(s);
    return ec ? nullptr : s;
  }

  std::shared_ptr<tcp::socket> track(tcp::socket s) {
    auto shared = std::make_shared<tcp::socket>(std::move(s));
    std::lock_guard lock(mutex_);
    sockets_.push_back(shared);
    return shared;
  }

  void relay_http(tcp::socket accepted) {
    namespace http = boost::beast::http;
    const auto client = track(std::move(accepted));
    const auto upstream = connect(upstream_http_);
    if (!upstream) return;
    boost::beast::flat_buffer from_client, from_upstream;
    boost::system::error_code ec;
    while (!stopping_) {
      http::request<http::string_body> req;
      http::read(*client, from_client, req, ec);
      if (ec) return;
      http::write(*upstream, req, ec);
      http::response<http::string_body> res;
      if (!ec) http::read(*upstream, from_upstream, res, ec);
      if (ec) return;
      if (req.target() == "/internal/kv/info" && res.result() == http::status::ok) {
        nlohmann::json info = nlohmann::json::parse(res.body());
        upstream_kv_ = info["transport"]["port"].get<uint16_t>();
        info["transport"]["port"] = kv_.acceptor.local_endpoint().port();
        res.body() = info.dump();
        res.prepare_payload();
      }
      http::write(*client, res, ec);
      if (ec) return;
    }
  }

  void relay_kv(tcp::socket accepted) {
    const auto reader = track(std::move(accepted));
    const auto writer = connect(upstream_kv_);
    if (!writer) return;
    {
      std::lock_guard lock(mutex_);
      threads_.emplace_back([this, reader, writer] { pump(*reader, *writer, false); });
    }
    pump(*writer, *reader, true);
  }

  // Copies until either side closes, then closes both.
  void pump(tcp::socket& from, tcp::socket& to, bool throttled) {
    std::vector<char> buffer(4096);
    boost::system::error_code ec;
    while (!stopping_) {
      const size_t n = from.read_some(boost::asio::buffer(buffer), ec);
      if (ec) break;
      if (throttled) std::this_thread::sleep_for(gap_);
      boost::asio::write(to, boost::asio::buffer(buffer.data(), n), ec);
      if (ec) break;
      if (throttled) kv_bytes_ += n;
    }
    from.shutdown(tcp::socket::shutdown_both, ec);
    to.shutdown(tcp::socket::shutdown_both, ec);
  }

  const uint16_t upstream_http_;
  const std::chrono::milliseconds gap_;
  boost::asio::io_context io_;
  Listener http_{io_}, kv_{io_};
  std::atomic<uint16_t> upstream_kv_ = 0;
  std::atomic<uint64_t> kv_bytes_ = 0;
  std::atomic<bool> stopping_ = false;
  std::mutex mutex_;
  std::vector<std::thread> threads_;
  std::vector<std::shared_ptr<tcp::socket>> sockets_;
};

}  // namespace moe::testing
