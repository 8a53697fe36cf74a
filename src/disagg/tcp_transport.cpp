#include "disagg/tcp_transport.h"

#include <sys/socket.h>

#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "disagg/tcp_wire.h"

namespace moe::disagg {

namespace {

namespace asio = boost::asio;
using asio::as_tuple;
using asio::use_awaitable;
using asio::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

// Beyond this many concurrent transfers to one peer, transfers queue for a connection: one
// transport thread moves them all, so more streams stop adding bandwidth long before they
// stop costing sockets and kernel buffers.
constexpr int kMaxConnectionsPerPeer = 4;
// The most one read or write call may move: asio's default of 64 KiB would cost a system call
// per 64 KiB of a range that is often megabytes.
constexpr size_t kMaxChunk = size_t(16) << 20;

// A socket whose operations must keep making progress: when its deadline passes it is closed,
// which aborts whatever waits on it. Used on the transport thread only.
class Link : public std::enable_shared_from_this<Link> {
 public:
  explicit Link(tcp::socket s) : socket(std::move(s)), resolver(socket.get_executor()), timer_(socket.get_executor()) {}
  explicit Link(asio::io_context& io) : Link(tcp::socket(io)) {}

  tcp::socket socket;
  tcp::resolver resolver;

  // From now on, every stretch of `window` without progress() closes the link.
  void expect_progress(std::chrono::milliseconds window) {
    window_ = window;
    progress();
    arm();
  }
  void progress() { deadline_ = Clock::now() + window_; }
  // Waits without a limit from now on, such as for a client's next request.
  void relax() {
    armed_ = false;
    timer_.cancel();
  }
  void abort() {
    relax();
    resolver.cancel();
    error_code ec;
    socket.close(ec);
  }
  bool stalled() const { return stalled_; }

 private:
  void arm() {
    armed_ = true;
    timer_.expires_at(deadline_);
    timer_.async_wait([self = shared_from_this()](const error_code& ec) {
      if (ec || !self->armed_) return;
      if (Clock::now() < self->deadline_) return self->arm();
      self->stalled_ = true;
      self->abort();
    });
  }

  asio::steady_timer timer_;
  std::chrono::milliseconds window_{0};
  Clock::time_point deadline_;
  bool armed_ = false;
  bool stalled_ = false;
};

// A completion condition for asio::async_read/async_write that allows big system calls and
// counts each one as progress (and, given `moved`, publishes how far it got).
auto progressing(Link& link, std::atomic<uint64_t>* moved = nullptr) {
  return [&link, moved](const error_code& ec, size_t done) -> size_t {
    if (ec) return 0;
    link.progress();
    if (moved) moved->store(done, std::memory_order_relaxed);
    return kMaxChunk;
  };
}

// Requests and answer headers are small writes that must not wait on Nagle's algorithm.
// Socket buffer sizes are left to the kernel: setting SO_RCVBUF turns off its autotuning,
// which grows the buffers further on a fast link.
void tune(tcp::socket& socket) {
  error_code ec;
  socket.set_option(tcp::no_delay(true), ec);
}

// An idle pooled connection has nothing to read: end of file means the peer closed it (it
// restarted, say) and data would be a protocol error; either way it cannot carry a transfer.
bool quiet(tcp::socket& socket) {
  uint8_t byte;
  return ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

std::string cause(const error_code& ec) { return ec == asio::error::eof ? "the peer closed the connection" : ec.message(); }

struct Transfer {
  TransferId id = 0;
  std::string host, port;
  std::string peer;  // "host:port", for messages and as the pool key
  std::vector<ReadOp> ops;
  uint64_t total = 0;
  std::string rejection;  // why it fails before touching the network
  TransferCallback on_done;
  std::atomic<uint64_t> landed{0};
  // Under TcpTransport::mu_.
  TransferStatus status;
  bool running = false;  // its coroutine may still write into the local region
  // Transport thread only: the connection it is running on.
  std::shared_ptr<Link> link;
};

// The connections to one peer; each carries one transfer at a time.
struct Pool {
  std::vector<std::shared_ptr<Link>> idle;
  int open = 0;  // idle, connecting or busy
  std::deque<std::shared_ptr<Transfer>> waiting;
};

class TcpTransport final : public Transport {
 public:
  TcpTransport(const TransportConfig& config, MemoryRegion region, TcpTimeouts timeouts)
      : region_(region), timeouts_(timeouts), host_(config.host), acceptor_(io_) {
    listen(config);
    asio::co_spawn(io_, accept_loop(), asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }

  ~TcpTransport() override {
    asio::post(io_, [this] { shut_down(); });
    work_.reset();
    thread_.join();
  }

  TransportKind kind() const override { return TransportKind::kTcp; }

  nlohmann::json endpoint() const override {
    return {{"transport", "tcp"}, {"host", host_}, {"port", port_}, {"bytes", region_.bytes}};
  }

  TransferId submit(const nlohmann::json& remote, std::vector<ReadOp> ops, TransferCallback on_done) override {
    auto t = std::make_shared<Transfer>();
    t->on_done = std::move(on_done);
    t->rejection = prepare(*t, remote, std::move(ops));
    {
      std::lock_guard lock(mu_);
      t->id = next_id_++;
      transfers_.emplace(t->id, t);
    }
    asio::post(io_, [this, t] { start(t); });
    return t->id;
  }

  TransferStatus poll(TransferId id) override {
    std::lock_guard lock(mu_);
    const auto it = transfers_.find(id);
    return it == transfers_.end() ? unknown(id) : status_of(*it->second);
  }

  TransferStatus wait(TransferId id, std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mu_);
    const auto it = transfers_.find(id);
    if (it == transfers_.end()) return unknown(id);
    const std::shared_ptr<Transfer> t = it->second;
    changed_.wait_for(lock, timeout, [&] { return t->status.state != TransferState::kPending; });
    return status_of(*t);
  }

  void cancel(TransferId id) override {
    std::unique_lock lock(mu_);
    const auto it = transfers_.find(id);
    if (it == transfers_.end()) return;
    const std::shared_ptr<Transfer> t = it->second;
    // On the transport thread, where the callback must run and where the reads land: once the
    // socket is closed there, no read of this transfer can complete any more.
    asio::post(io_, [this, t] {
      finish(*t, TransferState::kCancelled, {});
      if (t->link) t->link->abort();
    });
    changed_.wait(lock, [&] { return t->status.state != TransferState::kPending && !t->running; });
  }

  void forget(TransferId id) override {
    std::lock_guard lock(mu_);
    const auto it = transfers_.find(id);
    if (it != transfers_.end() && it->second->status.state != TransferState::kPending) transfers_.erase(it);
  }

 private:
  void listen(const TransportConfig& config) {
    error_code ec;
    tcp::resolver resolver(io_);
    const auto endpoints = resolver.resolve(config.host, std::to_string(config.port), tcp::resolver::passive, ec);
    if (ec || endpoints.empty()) fail("tcp: cannot listen on {}:{}: the host does not resolve ({})", config.host, config.port, ec.message());
    const tcp::endpoint endpoint = endpoints.begin()->endpoint();
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) fail("tcp: cannot listen on {}:{}: {}", config.host, config.port, ec.message());
    port_ = acceptor_.local_endpoint().port();
  }

  // Cancels every pending transfer and closes every socket; the coroutines then wind down and
  // io_.run() returns.
  void shut_down() {
    stopping_ = true;
    error_code ec;
    acceptor_.close(ec);
    for (const auto& link : sessions_) link->abort();
    for (auto& [peer, pool] : pools_) {
      for (const auto& link : pool.idle) link->abort();
      pool.open -= int(pool.idle.size());
      pool.idle.clear();
    }
    std::vector<std::shared_ptr<Transfer>> all;
    {
      std::lock_guard lock(mu_);
      for (const auto& [id, t] : transfers_) all.push_back(t);
    }
    for (const auto& t : all) {
      finish(*t, TransferState::kCancelled, {});
      if (t->link) t->link->abort();
    }
  }

  // Everything about a transfer that can be checked without the network: the endpoint, and
  // every range against both regions. Empty when it may go ahead.
  std::string prepare(Transfer& t, const nlohmann::json& remote, std::vector<ReadOp> ops) const {
    uint64_t remote_bytes = 0;
    try {
      if (remote.at("transport").get<std::string>() != "tcp") return fmt::format("tcp: {} is not a TCP endpoint", remote.dump());
      t.host = remote.at("host").get<std::string>();
      t.port = std::to_string(remote.at("port").get<uint16_t>());
      remote_bytes = remote.at("bytes").get<uint64_t>();
    } catch (const nlohmann::json::exception&) {
      return fmt::format("tcp: {} is not a TCP endpoint (transport, host, port, bytes)", remote.dump());
    }
    t.peer = t.host + ":" + t.port;
    for (size_t i = 0; i < ops.size(); ++i) {
      const wire::Range local{ops[i].local_offset, ops[i].bytes};
      const wire::Range far{ops[i].remote_offset, ops[i].bytes};
      if (!wire::in_region(local, region_.bytes)) {
        return fmt::format("tcp: read {} from {} lands outside the local region of {} bytes ({})", i, t.peer, region_.bytes, wire::describe(local));
      }
      if (!wire::in_region(far, remote_bytes)) {
        return fmt::format("tcp: read {} is outside the region of {}, {} bytes ({})", i, t.peer, remote_bytes, wire::describe(far));
      }
    }
    t.ops = coalesce(std::move(ops));
    if (t.ops.size() > wire::kMaxRanges) {
      return fmt::format("tcp: a transfer from {} has {} ranges after coalescing, more than the {} allowed", t.peer, t.ops.size(), wire::kMaxRanges);
    }
    for (const ReadOp& op : t.ops) {
      if (op.bytes > wire::kMaxReadBytes - t.total) return fmt::format("tcp: a transfer from {} is over {} bytes", t.peer, wire::kMaxReadBytes);
      t.total += op.bytes;
    }
    return {};
  }

  static TransferStatus unknown(TransferId id) { return {TransferState::kFailed, fmt::format("tcp: unknown transfer {}", id), 0}; }

  static TransferStatus status_of(const Transfer& t) {
    TransferStatus s = t.status;
    if (s.state == TransferState::kPending) s.bytes = t.landed.load(std::memory_order_relaxed);
    return s;
  }

  // Moves a pending transfer to `state` and runs its callback; later calls change nothing.
  void finish(Transfer& t, TransferState state, std::string error) {
    TransferStatus status;
    {
      std::lock_guard lock(mu_);
      if (t.status.state != TransferState::kPending) return;
      if (state == TransferState::kDone) t.landed = t.total;
      t.status = {state, std::move(error), t.landed.load(std::memory_order_relaxed)};
      status = t.status;
    }
    changed_.notify_all();
    if (t.on_done) t.on_done(t.id, status);
  }

  void start(const std::shared_ptr<Transfer>& t) {
    if (!t->rejection.empty()) return finish(*t, TransferState::kFailed, t->rejection);
    if (t->ops.empty()) return finish(*t, TransferState::kDone, {});
    if (!pending(*t)) return;
    Pool& pool = pools_[t->peer];
    if (auto link = take_idle(pool)) return run(t, std::move(link));
    if (pool.open < kMaxConnectionsPerPeer) {
      ++pool.open;
      return run(t, std::make_shared<Link>(io_));
    }
    pool.waiting.push_back(t);
  }

  bool pending(const Transfer& t) {
    std::lock_guard lock(mu_);
    return t.status.state == TransferState::kPending;
  }

  static std::shared_ptr<Link> take_idle(Pool& pool) {
    while (!pool.idle.empty()) {
      std::shared_ptr<Link> link = std::move(pool.idle.back());
      pool.idle.pop_back();
      if (quiet(link->socket)) return link;
      link->abort();
      --pool.open;
    }
    return nullptr;
  }

  void run(const std::shared_ptr<Transfer>& t, std::shared_ptr<Link> link) {
    {
      std::lock_guard lock(mu_);
      t->running = true;
    }
    t->link = link;
    asio::co_spawn(io_, transfer(t, std::move(link)), asio::detached);
  }

  asio::awaitable<void> transfer(std::shared_ptr<Transfer> t, std::shared_ptr<Link> link) {
    std::string error;
    try {
      error = co_await exchange(*t, *link);
    } catch (const std::exception& e) {
      error = fmt::format("tcp: reading from {}: {}", t->peer, e.what());
    }
    t->link.reset();
    {
      std::lock_guard lock(mu_);
      t->running = false;
    }
    changed_.notify_all();  // a cancel() may be waiting for just this
    finish(*t, error.empty() ? TransferState::kDone : TransferState::kFailed, error);
    release(t->peer, std::move(link), error.empty());
  }

  // Hands a connection that finished a transfer to the next waiting one, or to the idle pool;
  // one that failed or was cancelled may have a half-read answer in it and is closed.
  void release(const std::string& peer, std::shared_ptr<Link> link, bool reusable) {
    Pool& pool = pools_[peer];
    if (!reusable || stopping_) {
      link->abort();
      link.reset();
      --pool.open;
    }
    while (!pool.waiting.empty()) {
      std::shared_ptr<Transfer> next = std::move(pool.waiting.front());
      pool.waiting.pop_front();
      if (!pending(*next)) continue;
      if (!link) {
        ++pool.open;
        link = std::make_shared<Link>(io_);
      }
      return run(next, std::move(link));
    }
    if (link) pool.idle.push_back(std::move(link));
  }

  // One request and its answer on `link`, opening it first if needed; the error, or empty.
  asio::awaitable<std::string> exchange(Transfer& t, Link& link) {
    if (!link.socket.is_open()) {
      if (std::string error = co_await connect(t, link); !error.empty()) co_return error;
    }
    link.expect_progress(timeouts_.stall);
    std::vector<wire::Range> ranges;
    ranges.reserve(t.ops.size());
    for (const ReadOp& op : t.ops) ranges.push_back({op.remote_offset, op.bytes});
    const std::vector<uint8_t> request = wire::encode_request(t.id, ranges);
    auto [ec, n] = co_await asio::async_write(link.socket, asio::buffer(request), progressing(link), as_tuple(use_awaitable));
    if (ec) co_return failure(t, link, ec);

    std::array<uint8_t, wire::kResponseHeaderBytes> head;
    std::tie(ec, n) = co_await asio::async_read(link.socket, asio::buffer(head), progressing(link), as_tuple(use_awaitable));
    if (ec) co_return failure(t, link, ec);
    const auto header = wire::decode_response_header(head);
    if (!header.ok()) co_return fmt::format("tcp: {} answered with garbage: {}", t.peer, header.error);
    if (!header.value.ok) co_return co_await refusal(t, link, header.value.length);
    if (header.value.transfer != t.id || header.value.length != t.total) {
      co_return fmt::format("tcp: {} answered transfer {} ({} bytes) with transfer {} ({} bytes)", t.peer, t.id, t.total, header.value.transfer,
                            header.value.length);
    }

    // Straight into the local region, range by range.
    std::vector<asio::mutable_buffer> into;
    into.reserve(t.ops.size());
    for (const ReadOp& op : t.ops) into.push_back(asio::buffer(static_cast<uint8_t*>(region_.base) + op.local_offset, op.bytes));
    std::tie(ec, n) = co_await asio::async_read(link.socket, into, progressing(link, &t.landed), as_tuple(use_awaitable));
    if (ec) co_return failure(t, link, ec);
    link.relax();
    co_return std::string();
  }

  asio::awaitable<std::string> connect(const Transfer& t, Link& link) {
    link.expect_progress(timeouts_.connect);
    auto [ec, endpoints] = co_await link.resolver.async_resolve(t.host, t.port, as_tuple(use_awaitable));
    if (!ec) std::tie(ec, std::ignore) = co_await asio::async_connect(link.socket, endpoints, as_tuple(use_awaitable));
    if (link.stalled()) co_return fmt::format("tcp: cannot connect to {}: no answer within {} ms", t.peer, timeouts_.connect.count());
    if (ec) co_return fmt::format("tcp: cannot connect to {}: {}", t.peer, ec.message());
    tune(link.socket);
    co_return std::string();
  }

  // The peer refused the request: its message says why.
  asio::awaitable<std::string> refusal(const Transfer& t, Link& link, uint64_t length) {
    std::string message(length, '\0');
    auto [ec, n] = co_await asio::async_read(link.socket, asio::buffer(message), as_tuple(use_awaitable));
    if (ec) message = "(its reason was lost: " + cause(ec) + ")";
    co_return fmt::format("tcp: {} refused the read: {}", t.peer, message);
  }

  std::string failure(const Transfer& t, const Link& link, const error_code& ec) const {
    if (link.stalled()) return fmt::format("tcp: reading from {}: no progress for {} ms", t.peer, timeouts_.stall.count());
    return fmt::format("tcp: reading from {}: {}", t.peer, cause(ec));
  }

  asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(as_tuple(use_awaitable));
      if (stopping_ || !acceptor_.is_open()) break;
      if (ec) {
        // Out of file descriptors and the like: pause rather than spin.
        asio::steady_timer pause(io_, std::chrono::milliseconds(50));
        co_await pause.async_wait(as_tuple(use_awaitable));
        continue;
      }
      tune(socket);
      auto link = std::make_shared<Link>(std::move(socket));
      sessions_.insert(link);
      asio::co_spawn(io_, serve(link), asio::detached);
    }
  }

  asio::awaitable<void> serve(std::shared_ptr<Link> link) {
    // Not `while (co_await serve_one(...))`: GCC 12 miscompiles a co_await in a loop condition
    // (the coroutine crashes when resumed).
    bool more = true;
    while (more) more = co_await serve_one(*link);
    link->abort();
    sessions_.erase(link);
  }

  // Answers one request; false when the connection is done with.
  asio::awaitable<bool> serve_one(Link& link) {
    // A reader may keep a pooled connection idle for as long as it likes.
    link.relax();
    std::array<uint8_t, wire::kRequestHeaderBytes> head;
    auto [ec, n] = co_await asio::async_read(link.socket, asio::buffer(head), as_tuple(use_awaitable));
    if (ec) co_return false;
    link.expect_progress(timeouts_.stall);
    const auto header = wire::decode_request_header(head);
    if (!header.ok()) co_return co_await refuse(link, header.value.transfer, header.error);

    std::vector<uint8_t> list(size_t(header.value.n_ranges) * wire::kRangeBytes);
    std::tie(ec, n) = co_await asio::async_read(link.socket, asio::buffer(list), progressing(link), as_tuple(use_awaitable));
    if (ec) co_return false;
    const auto ranges = wire::decode_ranges(list, header.value.n_ranges, region_.bytes);
    if (!ranges.ok()) co_return co_await refuse(link, header.value.transfer, ranges.error);

    // The header, then every range straight from the region.
    uint64_t total = 0;
    for (const wire::Range& r : ranges.value) total += r.bytes;
    const auto answer = wire::encode_response_header({header.value.transfer, true, total});
    std::vector<asio::const_buffer> out;
    out.reserve(ranges.value.size() + 1);
    out.push_back(asio::buffer(answer));
    for (const wire::Range& r : ranges.value) out.push_back(asio::buffer(static_cast<const uint8_t*>(region_.base) + r.offset, r.bytes));
    std::tie(ec, n) = co_await asio::async_write(link.socket, out, progressing(link), as_tuple(use_awaitable));
    co_return !ec;
  }

  // Answers a bad request with an error and ends the connection. What the client still sends
  // is read and dropped until it closes or the stall deadline passes: closing with unread
  // data would reset the connection, which can destroy the answer before the client reads it.
  asio::awaitable<bool> refuse(Link& link, uint64_t transfer, const std::string& message) {
    const std::vector<uint8_t> answer = wire::encode_error(transfer, message);
    auto [ec, n] = co_await asio::async_write(link.socket, asio::buffer(answer), as_tuple(use_awaitable));
    if (!ec) link.socket.shutdown(tcp::socket::shutdown_send, ec);
    std::array<uint8_t, 4096> scratch;
    while (!ec) std::tie(ec, n) = co_await link.socket.async_read_some(asio::buffer(scratch), as_tuple(use_awaitable));
    co_return false;
  }

  const MemoryRegion region_;
  const TcpTimeouts timeouts_;
  const std::string host_;
  uint16_t port_ = 0;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_ = asio::make_work_guard(io_);
  tcp::acceptor acceptor_;
  std::thread thread_;

  std::mutex mu_;
  std::condition_variable changed_;
  std::unordered_map<TransferId, std::shared_ptr<Transfer>> transfers_;
  TransferId next_id_ = 1;

  // Transport thread only.
  bool stopping_ = false;
  std::unordered_map<std::string, Pool> pools_;
  std::unordered_set<std::shared_ptr<Link>> sessions_;
};

}  // namespace

std::unique_ptr<Transport> make_tcp_transport(const TransportConfig& config, MemoryRegion region, TcpTimeouts timeouts) {
  return std::make_unique<TcpTransport>(config, region, timeouts);
}

}  // namespace moe::disagg
