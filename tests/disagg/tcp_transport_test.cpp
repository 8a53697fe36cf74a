// The TCP transport over loopback: its wire format, byte-exact reads, range checks on both
// sides, a hostile client, dead, stalled and vanishing peers, cancellation, destruction with
// transfers in flight, concurrency, several peers.
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <future>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "disagg/tcp_transport.h"
#include "disagg/tcp_wire.h"

namespace moe::disagg {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using namespace std::chrono_literals;

constexpr uint64_t kMiB = uint64_t(1) << 20;

// ---- wire format ----

std::span<const uint8_t> head_of(const std::vector<uint8_t>& frame, size_t n) { return {frame.data(), n}; }
std::span<const uint8_t> tail_of(const std::vector<uint8_t>& frame, size_t n) { return {frame.data() + n, frame.size() - n}; }

TEST(TcpWire, RequestRoundTrips) {
  const std::vector<wire::Range> ranges = {{0, 10}, {1000, 24}, {90, 10}};
  const std::vector<uint8_t> frame = wire::encode_request(42, ranges);
  ASSERT_EQ(frame.size(), wire::kRequestHeaderBytes + 3 * wire::kRangeBytes);
  const auto header = wire::decode_request_header(head_of(frame, wire::kRequestHeaderBytes));
  ASSERT_TRUE(header.ok()) << header.error;
  EXPECT_EQ(header.value.transfer, 42u);
  EXPECT_EQ(header.value.n_ranges, 3u);
  const auto decoded = wire::decode_ranges(tail_of(frame, wire::kRequestHeaderBytes), 3, 1024);
  ASSERT_TRUE(decoded.ok()) << decoded.error;
  ASSERT_EQ(decoded.value.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(decoded.value[i].offset, ranges[i].offset);
    EXPECT_EQ(decoded.value[i].bytes, ranges[i].bytes);
  }
}

TEST(TcpWire, ResponsesRoundTrip) {
  const auto ok = wire::encode_response_header({7, true, 123456789});
  const auto decoded = wire::decode_response_header(ok);
  ASSERT_TRUE(decoded.ok()) << decoded.error;
  EXPECT_EQ(decoded.value.transfer, 7u);
  EXPECT_TRUE(decoded.value.ok);
  EXPECT_EQ(decoded.value.length, 123456789u);

  const std::vector<uint8_t> error = wire::encode_error(8, "no such range");
  const auto refused = wire::decode_response_header(head_of(error, wire::kResponseHeaderBytes));
  ASSERT_TRUE(refused.ok()) << refused.error;
  EXPECT_FALSE(refused.value.ok);
  EXPECT_EQ(refused.value.transfer, 8u);
  const auto message = tail_of(error, wire::kResponseHeaderBytes);
  EXPECT_EQ(std::string(message.begin(), message.end()), "no such range");
  EXPECT_EQ(refused.value.length, message.size());

  const std::vector<uint8_t> long_error = wire::encode_error(9, std::string(10000, 'x'));
  EXPECT_EQ(long_error.size(), wire::kResponseHeaderBytes + wire::kMaxErrorBytes);
  EXPECT_TRUE(wire::decode_response_header(head_of(long_error, wire::kResponseHeaderBytes)).ok());
}

void expect_error(const std::string& error, const std::string& needle) {
  EXPECT_NE(error.find(needle), std::string::npos) << "'" << error << "' does not mention '" << needle << "'";
}

TEST(TcpWire, RejectsTruncatedAndGarbageRequests) {
  std::vector<uint8_t> frame = wire::encode_request(1, std::vector<wire::Range>{{0, 8}});
  expect_error(wire::decode_request_header(head_of(frame, 19)).error, "is 20 bytes, got 19");
  expect_error(wire::decode_ranges(tail_of(frame, wire::kRequestHeaderBytes + 1), 1, 100).error, "got 15");

  std::vector<uint8_t> bad = frame;
  bad[0] = 'X';
  expect_error(wire::decode_request_header(head_of(bad, wire::kRequestHeaderBytes)).error, "bad magic");
  bad = frame;
  bad[4] = 2;
  expect_error(wire::decode_request_header(head_of(bad, wire::kRequestHeaderBytes)).error, "version 2 is not supported");
  bad = frame;
  bad[6] = 1;
  expect_error(wire::decode_request_header(head_of(bad, wire::kRequestHeaderBytes)).error, "reserved");
  bad = frame;
  bad[19] = 0xff;  // n_ranges' top byte
  expect_error(wire::decode_request_header(head_of(bad, wire::kRequestHeaderBytes)).error, "ranges, more than");
  // A response is not a request.
  const auto response = wire::encode_response_header({1, true, 0});
  expect_error(wire::decode_request_header(std::span(response).first(wire::kRequestHeaderBytes)).error, "bad magic");
}

TEST(TcpWire, ChecksRangesAgainstTheRegion) {
  auto ranges_error = [](std::vector<wire::Range> ranges, uint64_t region) {
    const std::vector<uint8_t> frame = wire::encode_request(1, ranges);
    return wire::decode_ranges(tail_of(frame, wire::kRequestHeaderBytes), uint32_t(ranges.size()), region).error;
  };
  EXPECT_EQ(ranges_error({{0, 100}, {50, 50}}, 100), "");
  expect_error(ranges_error({{0, 10}, {95, 6}}, 100), "range 1 (6 bytes at offset 95) is outside the region of 100 bytes");
  expect_error(ranges_error({{UINT64_MAX, 2}}, 100), "range 0");
  expect_error(ranges_error({{2, UINT64_MAX}}, UINT64_MAX), "range 0");
  expect_error(ranges_error({{0, wire::kMaxReadBytes}, {0, 1}}, UINT64_MAX), "more than");
  EXPECT_FALSE(wire::decode_ranges({}, wire::kMaxRanges + 1, 100).ok());

  EXPECT_TRUE(wire::in_region({0, 0}, 0));
  EXPECT_TRUE(wire::in_region({100, 0}, 100));
  EXPECT_FALSE(wire::in_region({101, 0}, 100));
  EXPECT_FALSE(wire::in_region({1, UINT64_MAX}, UINT64_MAX));
}

TEST(TcpWire, RejectsBadResponses) {
  auto response_error = [](const wire::ResponseHeader& h, size_t at = 0, uint8_t value = 0) {
    auto frame = wire::encode_response_header(h);
    if (at > 0) frame[at] = value;
    return wire::decode_response_header(frame).error;
  };
  expect_error(response_error({1, true, 0}, 3, 'Q'), "bad magic");
  expect_error(response_error({1, true, 0}, 6, 7), "unknown status 7");
  expect_error(response_error({1, true, wire::kMaxReadBytes + 1}), "announces");
  expect_error(response_error({1, false, wire::kMaxErrorBytes + 1}), "longer than");
  const std::vector<uint8_t> request = wire::encode_request(1, std::vector<wire::Range>{{0, 0}});
  expect_error(wire::decode_response_header(head_of(request, wire::kResponseHeaderBytes)).error, "bad magic");
  expect_error(wire::decode_response_header(head_of(request, 3)).error, "got 3");
}

// ---- the transport ----

// A region filled with a pattern that differs at every offset and between seeds.
struct Region {
  explicit Region(uint64_t bytes, uint8_t seed = 0) : data(bytes) {
    if (seed == 0) return;
    for (uint64_t i = 0; i < bytes; ++i) data[i] = uint8_t((i * 2654435761u >> 7) + seed + (i >> 16));
  }
  MemoryRegion view() { return {data.data(), data.size()}; }
  std::vector<uint8_t> data;
};

std::unique_ptr<Transport> open(Region& r, TcpTimeouts timeouts = {}) { return make_tcp_transport({TransportKind::kTcp, "127.0.0.1", 0}, r.view(), timeouts); }

bool landed(const Region& from, const Region& to, const ReadOp& op) {
  return std::equal(from.data.begin() + op.remote_offset, from.data.begin() + op.remote_offset + op.bytes, to.data.begin() + op.local_offset);
}

bool untouched(const Region& r, uint64_t begin, uint64_t end) {
  return std::all_of(r.data.begin() + begin, r.data.begin() + end, [](uint8_t b) { return b == 0; });
}

nlohmann::json endpoint_at(uint16_t port, uint64_t bytes) { return {{"transport", "tcp"}, {"host", "127.0.0.1"}, {"port", port}, {"bytes", bytes}}; }

// A port that nobody listens on (it was free a moment ago).
uint16_t free_port() {
  asio::io_context io;
  tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  return acceptor.local_endpoint().port();
}

// Records every callback of a transport.
struct Callbacks {
  TransferCallback callback() {
    return [this](TransferId id, const TransferStatus& s) {
      std::lock_guard lock(mu);
      calls.push_back({id, s});
      threads.push_back(std::this_thread::get_id());
    };
  }
  size_t count(TransferId id) {
    std::lock_guard lock(mu);
    return size_t(std::count_if(calls.begin(), calls.end(), [&](const auto& c) { return c.first == id; }));
  }
  std::mutex mu;
  std::vector<std::pair<TransferId, TransferStatus>> calls;
  std::vector<std::thread::id> threads;
};

TEST(TcpTransport, EndpointNamesTheRealPort) {
  Region r(4096);
  auto t = open(r);
  const nlohmann::json e = t->endpoint();
  EXPECT_EQ(t->kind(), TransportKind::kTcp);
  EXPECT_EQ(e.at("transport"), "tcp");
  EXPECT_EQ(e.at("host"), "127.0.0.1");
  EXPECT_NE(e.at("port").get<int>(), 0);
  EXPECT_EQ(e.at("bytes").get<uint64_t>(), 4096u);
}

TEST(TcpTransport, ATakenPortIsAnError) {
  Region r(4096);
  auto first = open(r);
  const auto port = first->endpoint().at("port").get<uint16_t>();
  try {
    (void)make_tcp_transport({TransportKind::kTcp, "127.0.0.1", port}, r.view());
    FAIL() << "a second transport listens on " << port;
  } catch (const Error& e) {
    expect_error(e.what(), fmt::format("tcp: cannot listen on 127.0.0.1:{}: ", port));
  }
}

TEST(TcpTransport, ReadsRangesByteExactAndCallsBackOnce) {
  Region remote(65 * kMiB, 1), local(66 * kMiB);
  auto server = open(remote);
  auto reader = open(local);
  // The first two continue one another on both sides and travel as one range.
  const std::vector<ReadOp> ops = {{0, 8192, 4096}, {4096, 12288, 4096}, {100000, 50000, 3000}, {7, 1, 1}, {kMiB, 2 * kMiB, 64 * kMiB}};
  Callbacks callbacks;
  const TransferId id = reader->submit(server->endpoint(), ops, callbacks.callback());
  const TransferStatus s = reader->wait(id, 10s);
  ASSERT_EQ(s.state, TransferState::kDone) << s.error;
  EXPECT_EQ(s.bytes, 64 * kMiB + 4096 * 2 + 3000 + 1);
  for (const ReadOp& op : ops) EXPECT_TRUE(landed(remote, local, op)) << op.local_offset;
  EXPECT_TRUE(untouched(local, 0, 1));
  EXPECT_TRUE(untouched(local, 2, 8192));
  EXPECT_TRUE(untouched(local, 16384, 50000));
  EXPECT_TRUE(untouched(local, 53000, 2 * kMiB));
  reader.reset();  // after which no callback can come any more
  ASSERT_EQ(callbacks.count(id), 1u);
  EXPECT_EQ(callbacks.calls[0].second.state, TransferState::kDone);
  EXPECT_NE(callbacks.threads[0], std::this_thread::get_id());
}

TEST(TcpTransport, RangesOutsideEitherRegionFailNamingTheRange) {
  Region remote(64 * 1024, 1), local(32 * 1024);
  auto server = open(remote);
  auto reader = open(local);
  const std::string peer = fmt::format("127.0.0.1:{}", server->endpoint().at("port").get<int>());

  TransferStatus s = reader->wait(reader->submit(server->endpoint(), {{0, 0, 16}, {0, 30 * 1024, 4096}}), 5s);
  EXPECT_EQ(s.state, TransferState::kFailed);
  expect_error(s.error, "read 1 from " + peer + " lands outside the local region of 32768 bytes (4096 bytes at offset 30720)");

  s = reader->wait(reader->submit(server->endpoint(), {{64 * 1024 - 8, 0, 16}}), 5s);
  EXPECT_EQ(s.state, TransferState::kFailed);
  expect_error(s.error, "read 0 is outside the region of " + peer + ", 65536 bytes (16 bytes at offset 65528)");

  // An endpoint that claims more than the server has: the server itself refuses.
  nlohmann::json inflated = server->endpoint();
  inflated["bytes"] = 1 << 20;
  s = reader->wait(reader->submit(inflated, {{0, 0, 16}, {100000, 16, 16}}), 5s);
  EXPECT_EQ(s.state, TransferState::kFailed);
  expect_error(s.error, peer + " refused the read: range 1 (16 bytes at offset 100000) is outside the region of 65536 bytes");
  EXPECT_TRUE(untouched(local, 0, local.data.size()));
}

TEST(TcpTransport, ABadEndpointOrNoOpsNeedNoNetwork) {
  Region local(4096);
  auto reader = open(local);
  Callbacks callbacks;
  const TransferId bad = reader->submit({{"transport", "ucx"}}, {{0, 0, 1}}, callbacks.callback());
  EXPECT_EQ(reader->wait(bad, 5s).state, TransferState::kFailed);
  expect_error(reader->poll(bad).error, "is not a TCP endpoint");
  const TransferId none = reader->submit(endpoint_at(free_port(), 4096), {{0, 0, 0}}, callbacks.callback());
  EXPECT_EQ(reader->wait(none, 5s).state, TransferState::kDone);
  reader->forget(none);
  EXPECT_EQ(reader->poll(none).state, TransferState::kFailed);
  expect_error(reader->poll(none).error, "unknown transfer");
  reader.reset();
  EXPECT_EQ(callbacks.count(bad), 1u);
  EXPECT_EQ(callbacks.count(none), 1u);
}

TEST(TcpTransport, NobodyListeningFailsQuicklyNamingThePeer) {
  Region local(4096);
  auto reader = open(local);
  const uint16_t port = free_port();
  const auto start = std::chrono::steady_clock::now();
  const TransferStatus s = reader->wait(reader->submit(endpoint_at(port, 4096), {{0, 0, 4096}}), 10s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_EQ(s.state, TransferState::kFailed);
  expect_error(s.error, fmt::format("cannot connect to 127.0.0.1:{}: ", port));
}

// Sends raw bytes to a transport's server and reads its answer, as a hostile client would.
struct RawClient {
  explicit RawClient(uint16_t port) : socket(io) { socket.connect({asio::ip::make_address("127.0.0.1"), port}); }
  wire::ResponseHeader refusal(const std::vector<uint8_t>& request, std::string& message) {
    asio::write(socket, asio::buffer(request));
    std::array<uint8_t, wire::kResponseHeaderBytes> head;
    asio::read(socket, asio::buffer(head));
    const auto header = wire::decode_response_header(head);
    EXPECT_TRUE(header.ok()) << header.error;
    message.resize(header.value.length);
    asio::read(socket, asio::buffer(message));
    return header.value;
  }
  bool closed() {
    uint8_t byte;
    error_code ec;
    asio::read(socket, asio::buffer(&byte, 1), ec);
    return ec == asio::error::eof;
  }
  asio::io_context io;
  tcp::socket socket;
};

TEST(TcpTransport, AHostileRequestGetsAnErrorAndTheServerCarriesOn) {
  Region remote(64 * 1024, 1), local(64 * 1024);
  auto server = open(remote);
  const auto port = server->endpoint().at("port").get<uint16_t>();
  {
    RawClient client(port);
    std::string message;
    const wire::ResponseHeader h = client.refusal(wire::encode_request(9, std::vector<wire::Range>{{0, 16}, {64 * 1024 - 10, 100}}), message);
    EXPECT_FALSE(h.ok);
    EXPECT_EQ(h.transfer, 9u);
    expect_error(message, "range 1 (100 bytes at offset 65526) is outside the region of 65536 bytes");
    EXPECT_TRUE(client.closed());
  }
  {
    RawClient client(port);
    std::string message;
    EXPECT_FALSE(client.refusal(std::vector<uint8_t>(100, 'x'), message).ok);
    expect_error(message, "bad magic");
    EXPECT_TRUE(client.closed());
  }
  auto reader = open(local);
  const TransferStatus s = reader->wait(reader->submit(server->endpoint(), {{100, 200, 1000}}), 5s);
  ASSERT_EQ(s.state, TransferState::kDone) << s.error;
  EXPECT_TRUE(landed(remote, local, {100, 200, 1000}));
}

// A hand-written server for what a real one never does: stalling and dying mid-answer. It
// answers the first connection with the header of a full answer and `sent` bytes of 0xab,
// then waits for go() and sends 0xcd bytes or closes, as `then_close` says.
class HalfAnswer {
 public:
  HalfAnswer(size_t sent, bool then_close) : acceptor_(io_, {asio::ip::make_address("127.0.0.1"), 0}) {
    thread_ = std::thread([this, sent, then_close] {
      tcp::socket socket(io_);
      acceptor_.accept(socket);
      std::array<uint8_t, wire::kRequestHeaderBytes> head;
      asio::read(socket, asio::buffer(head));
      const auto header = wire::decode_request_header(head).value;
      std::vector<uint8_t> list(header.n_ranges * wire::kRangeBytes);
      asio::read(socket, asio::buffer(list));
      uint64_t total = 0;
      for (const wire::Range& r : wire::decode_ranges(list, header.n_ranges, UINT64_MAX).value) total += r.bytes;
      asio::write(socket, asio::buffer(wire::encode_response_header({header.transfer, true, total})));
      asio::write(socket, asio::buffer(std::vector<uint8_t>(sent, 0xab)));
      go_.get_future().wait();
      error_code ec;
      if (!then_close) asio::write(socket, asio::buffer(std::vector<uint8_t>(total - sent, 0xcd)), ec);
    });
  }
  ~HalfAnswer() {
    go();
    thread_.join();
  }
  void go() {
    if (!released_.exchange(true)) go_.set_value();
  }
  nlohmann::json endpoint(uint64_t bytes) const { return endpoint_at(acceptor_.local_endpoint().port(), bytes); }

 private:
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::promise<void> go_;
  std::atomic<bool> released_{false};
  std::thread thread_;
};

// Polls until `done` holds or two seconds pass.
template <class F>
bool eventually(F done) {
  const auto end = std::chrono::steady_clock::now() + 2s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

TEST(TcpTransport, AfterCancelNoByteLands) {
  Region local(kMiB);
  HalfAnswer peer(1000, false);
  auto reader = open(local);
  Callbacks callbacks;
  const TransferId id = reader->submit(peer.endpoint(kMiB), {{0, 0, kMiB}}, callbacks.callback());
  ASSERT_TRUE(eventually([&] { return reader->poll(id).bytes == 1000; }));
  reader->cancel(id);
  EXPECT_EQ(reader->poll(id).state, TransferState::kCancelled);
  EXPECT_EQ(callbacks.count(id), 1u);
  peer.go();
  std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(std::all_of(local.data.begin(), local.data.begin() + 1000, [](uint8_t b) { return b == 0xab; }));
  EXPECT_TRUE(untouched(local, 1000, kMiB));
  reader->cancel(id);  // a finished transfer: nothing happens
  EXPECT_EQ(callbacks.count(id), 1u);
}

TEST(TcpTransport, CancelsABigTransfer) {
  Region remote(64 * kMiB, 3), local(64 * kMiB);
  auto server = open(remote);
  auto reader = open(local);
  Callbacks callbacks;
  const TransferId id = reader->submit(server->endpoint(), {{0, 0, 64 * kMiB}}, callbacks.callback());
  ASSERT_TRUE(eventually([&] { return reader->poll(id).bytes > 0; }));
  reader->cancel(id);
  // Loopback may have been quicker than the cancel.
  const TransferStatus s = reader->poll(id);
  EXPECT_TRUE(s.state == TransferState::kCancelled || s.state == TransferState::kDone) << transfer_state_name(s.state);
  EXPECT_EQ(callbacks.count(id), 1u);
  // The connection of a cancelled transfer is not reused: the next read is exact.
  const TransferStatus next = reader->wait(reader->submit(server->endpoint(), {{5, 0, 4096}}), 5s);
  ASSERT_EQ(next.state, TransferState::kDone) << next.error;
  EXPECT_TRUE(landed(remote, local, {5, 0, 4096}));
}

TEST(TcpTransport, APeerDyingMidAnswerFailsTheTransfer) {
  Region local(kMiB);
  HalfAnswer peer(5000, true);
  auto reader = open(local);
  const TransferId id = reader->submit(peer.endpoint(kMiB), {{0, 0, kMiB}});
  ASSERT_TRUE(eventually([&] { return reader->poll(id).bytes == 5000; }));
  peer.go();
  const TransferStatus s = reader->wait(id, 5s);
  EXPECT_EQ(s.state, TransferState::kFailed);
  expect_error(s.error, fmt::format("reading from 127.0.0.1:{}: the peer closed the connection", peer.endpoint(0).at("port").get<int>()));
}

TEST(TcpTransport, AStalledPeerFailsTheTransfer) {
  Region local(kMiB);
  HalfAnswer peer(10, false);
  auto reader = open(local, {5000ms, 200ms});
  const auto start = std::chrono::steady_clock::now();
  const TransferStatus s = reader->wait(reader->submit(peer.endpoint(kMiB), {{0, 0, kMiB}}), 5s);
  EXPECT_EQ(s.state, TransferState::kFailed);
  expect_error(s.error, fmt::format("reading from 127.0.0.1:{}: no progress for 200 ms", peer.endpoint(0).at("port").get<int>()));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

TEST(TcpTransport, DestructionCancelsPendingTransfers) {
  Region local(kMiB);
  HalfAnswer peer(10, false);
  auto reader = open(local);
  Callbacks callbacks;
  // One is answered in part; the other connects but is never answered.
  std::vector<TransferId> ids;
  for (int i = 0; i < 2; ++i) ids.push_back(reader->submit(peer.endpoint(kMiB), {{0, 0, kMiB}}, callbacks.callback()));
  ASSERT_TRUE(eventually([&] { return reader->poll(ids[0]).bytes + reader->poll(ids[1]).bytes == 10; }));
  reader.reset();
  for (const TransferId id : ids) EXPECT_EQ(callbacks.count(id), 1u);
  for (const auto& [id, s] : callbacks.calls) EXPECT_EQ(s.state, TransferState::kCancelled);
}

TEST(TcpTransport, ConcurrentTransfersFromSeveralThreads) {
  constexpr int kThreads = 4, kEach = 6;
  constexpr uint64_t kChunk = 512 * 1024;
  Region remote(kThreads * kEach * kChunk, 5), local(kThreads * kEach * kChunk);
  auto server = open(remote);
  auto reader = open(local);
  std::vector<std::thread> threads;
  std::atomic<int> done{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<TransferId> ids;
      for (int i = 0; i < kEach; ++i) {
        // Reversed, so that no range stays in place.
        const uint64_t at = uint64_t(t * kEach + i) * kChunk;
        ids.push_back(reader->submit(server->endpoint(), {{at, local.data.size() - at - kChunk, kChunk}}));
      }
      for (const TransferId id : ids) done += reader->wait(id, 10s).state == TransferState::kDone;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(done, kThreads * kEach);
  for (uint64_t at = 0; at < remote.data.size(); at += kChunk) EXPECT_TRUE(landed(remote, local, {at, local.data.size() - at - kChunk, kChunk})) << at;
}

TEST(TcpTransport, ReadsFromTwoPeers) {
  Region a(kMiB, 7), b(kMiB, 9), local(2 * kMiB);
  auto peer_a = open(a);
  auto peer_b = open(b);
  auto reader = open(local);
  const TransferId from_a = reader->submit(peer_a->endpoint(), {{0, 0, kMiB}});
  const TransferId from_b = reader->submit(peer_b->endpoint(), {{0, kMiB, kMiB}});
  ASSERT_EQ(reader->wait(from_a, 5s).state, TransferState::kDone);
  ASSERT_EQ(reader->wait(from_b, 5s).state, TransferState::kDone);
  EXPECT_TRUE(landed(a, local, {0, 0, kMiB}));
  EXPECT_TRUE(landed(b, local, {0, kMiB, kMiB}));
}

TEST(TcpTransport, ReconnectsAfterThePeerRestarts) {
  Region remote(64 * 1024, 11), local(64 * 1024);
  auto server = open(remote);
  const nlohmann::json endpoint = server->endpoint();
  auto reader = open(local);
  ASSERT_EQ(reader->wait(reader->submit(endpoint, {{0, 0, 100}}), 5s).state, TransferState::kDone);
  // The pooled connection now leads nowhere.
  server.reset();
  server = make_tcp_transport({TransportKind::kTcp, "127.0.0.1", endpoint.at("port").get<uint16_t>()}, remote.view());
  const TransferStatus s = reader->wait(reader->submit(endpoint, {{100, 100, 100}}), 5s);
  ASSERT_EQ(s.state, TransferState::kDone) << s.error;
  EXPECT_TRUE(landed(remote, local, {100, 100, 100}));
}

}  // namespace
}  // namespace moe::disagg
