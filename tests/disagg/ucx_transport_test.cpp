// The UCX transport between transports of one process: a reader maps its peer's memory
// file (the same-host path), or UCX connects them as peers on one host (shared memory),
// or, told to, over TCP alone as between hosts. The fixture's tests run on the first two.
#include "disagg/ucx_transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <span>
#include <thread>

#include "core/shared_memory.h"
#include "support/bytes_test_util.h"

namespace moe::disagg {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kRegionBytes = 80 * kMiB;

// A byte that depends on the high bits of its offset too, so a read landing at a shifted
// offset shows.
uint8_t pattern_byte(uint64_t offset, uint8_t seed) { return uint8_t((offset * 2654435761u) >> 11) ^ seed; }

// A memory file, as the KV pool is.
struct Region {
  Region(uint64_t bytes, int seed) : file("ucx-test", bytes), data(static_cast<uint8_t*>(file.data()), bytes) {
    if (seed < 0) return;
    for (uint64_t i = 0; i < bytes; ++i) data[i] = pattern_byte(i, uint8_t(seed));
  }
  MemoryRegion memory() { return {data.data(), data.size(), file.fd()}; }
  SharedMemory file;
  std::span<uint8_t> data;
};

std::unique_ptr<Transport> make_local(Region& region, bool map_same_host = true, uint16_t port = 0) {
  return make_ucx_transport({TransportKind::kUcx, "127.0.0.1", port, map_same_host}, region.memory());
}

// Counts the callback's calls and keeps the status it was given.
struct Completion {
  std::atomic<int> calls = 0;
  TransferStatus status;
  TransferCallback callback() {
    return [this](TransferId, const TransferStatus& s) {
      status = s;
      ++calls;
    };
  }
};

// The bytes of `op` in `reader` are those of the region filled with `seed`.
void expect_landed(const Region& reader, uint8_t seed, const ReadOp& op) {
  for (uint64_t i = 0; i < op.bytes; ++i) {
    if (reader.data[op.local_offset + i] != pattern_byte(op.remote_offset + i, seed)) {
      ADD_FAILURE() << "byte " << i << " of the read from " << op.remote_offset << " to " << op.local_offset;
      return;
    }
  }
}

// Made once: first touching 160 MiB of fresh pages would take most of each test's time.
Region& shared_source() {
  static Region region(kRegionBytes, 1);
  return region;
}
Region& shared_reader() {
  static Region region(kRegionBytes, -1);
  return region;
}

// The parameter: whether readers map same-host peers (else UCX's gets over shared memory).
class UcxTransportTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { std::fill(reader_.data.begin(), reader_.data.end(), 0); }
  std::unique_ptr<Transport> make(Region& region, uint16_t port = 0) { return make_local(region, GetParam(), port); }

  Region& source_ = shared_source();
  Region& reader_ = shared_reader();
  std::unique_ptr<Transport> server_ = make(source_);
  std::unique_ptr<Transport> client_ = make(reader_);
};

INSTANTIATE_TEST_SUITE_P(SameHost, UcxTransportTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Mapped" : "UcxGets"; });

TEST_P(UcxTransportTest, EndpointDescribesTheRegion) {
  const nlohmann::json ep = server_->endpoint();
  EXPECT_EQ(server_->kind(), TransportKind::kUcx);
  EXPECT_EQ(ep.at("transport"), "ucx");
  EXPECT_EQ(ep.at("host"), "127.0.0.1");
  EXPECT_NE(ep.at("port").get<int>(), 0);
  EXPECT_EQ(ep.at("base").get<uint64_t>(), reinterpret_cast<uint64_t>(source_.data.data()));
  EXPECT_EQ(ep.at("bytes").get<uint64_t>(), kRegionBytes);
  EXPECT_FALSE(ep.at("rkey").get<std::string>().empty());
  EXPECT_EQ(ep.at("same_host").at("pid").get<int64_t>(), int64_t{getpid()});
  EXPECT_EQ(ep.at("same_host").at("fd").get<int>(), source_.file.fd());
  EXPECT_NE(client_->endpoint().at("port"), ep.at("port"));
}

TEST_P(UcxTransportTest, ReadsLandByteExact) {
  const std::vector<ReadOp> ops = {
      {0, 0, 4096},
      {4096, 4096, 100},  // continues the first on both sides
      {kMiB + 3, 5 * kMiB + 7, 12345},
      {200, 3 * kMiB, 1},
      {8 * kMiB, 16 * kMiB, 64 * kMiB},
  };
  uint64_t total = 0;
  for (const ReadOp& op : ops) total += op.bytes;
  Completion done;
  const TransferId id = client_->submit(server_->endpoint(), ops, done.callback());
  const TransferStatus status = client_->wait(id, 10s);
  ASSERT_EQ(status.state, TransferState::kDone) << status.error;
  EXPECT_EQ(status.bytes, total);
  for (const ReadOp& op : ops) expect_landed(reader_, 1, op);
  EXPECT_EQ(reader_.data[4196], 0);  // just past the coalesced read
  EXPECT_EQ(reader_.data[5 * kMiB + 6], 0);
  EXPECT_EQ(done.calls, 1);
  EXPECT_EQ(done.status.state, TransferState::kDone);
  EXPECT_EQ(done.status.bytes, total);
}

TEST_P(UcxTransportTest, ManySmallReads) {
  // Not coalescable (each goes to the left of the previous one): thousands of gets.
  std::vector<ReadOp> ops;
  for (uint64_t i = 0; i < 5000; ++i) ops.push_back({i * 1000, (5000 - i) * 1000, 700});
  const TransferId id = client_->submit(server_->endpoint(), ops);
  const TransferStatus status = client_->wait(id, 10s);
  ASSERT_EQ(status.state, TransferState::kDone) << status.error;
  EXPECT_EQ(status.bytes, 5000u * 700);
  for (const ReadOp& op : ops) expect_landed(reader_, 1, op);
}

TEST_P(UcxTransportTest, AnEmptyBatchIsDone) {
  const TransferId id = client_->submit(server_->endpoint(), {{5, 5, 0}});
  EXPECT_EQ(client_->wait(id, 5s).state, TransferState::kDone);
}

TEST_P(UcxTransportTest, ReadsOutsideEitherRegionFail) {
  const std::string peer = fmt::format("127.0.0.1:{}", server_->endpoint().at("port").get<int>());
  Completion outside_remote;
  const TransferId remote_id =
      client_->submit(server_->endpoint(), {{0, 0, 10}, {kRegionBytes - 10, 0, 20}}, outside_remote.callback());
  const TransferId local_id = client_->submit(server_->endpoint(), {{0, kRegionBytes, 1}});
  const TransferId huge_id = client_->submit(server_->endpoint(), {{1, 0, ~uint64_t{0}}});

  const TransferStatus remote = client_->wait(remote_id, 5s);
  EXPECT_EQ(remote.state, TransferState::kFailed);
  EXPECT_CONTAINS(remote.error, "outside");
  EXPECT_CONTAINS(remote.error, peer);
  EXPECT_EQ(outside_remote.calls, 1);
  EXPECT_EQ(reader_.data[0], 0) << "a failed batch must not be read in part";

  const TransferStatus local = client_->wait(local_id, 5s);
  EXPECT_EQ(local.state, TransferState::kFailed);
  EXPECT_CONTAINS(local.error, "local region");
  EXPECT_EQ(client_->wait(huge_id, 5s).state, TransferState::kFailed);
}

TEST_P(UcxTransportTest, BadEndpointsFail) {
  nlohmann::json tcp = server_->endpoint();
  tcp["transport"] = "tcp";
  nlohmann::json no_rkey = server_->endpoint();
  no_rkey.erase("rkey");
  nlohmann::json bad_rkey = server_->endpoint();
  bad_rkey["rkey"] = "not base64!";
  for (const nlohmann::json& remote : {tcp, no_rkey, bad_rkey}) {
    const TransferStatus status = client_->wait(client_->submit(remote, {{0, 0, 8}}), 5s);
    EXPECT_EQ(status.state, TransferState::kFailed) << remote.dump();
    EXPECT_CONTAINS(status.error, "ucx: ");
  }
}

uint16_t unused_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), length), 0);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length), 0);
  close(fd);
  return ntohs(addr.sin_port);
}

TEST_P(UcxTransportTest, NobodyListeningFailsSoon) {
  nlohmann::json remote = server_->endpoint();
  const uint16_t port = unused_port();
  remote["port"] = port;
  remote.erase("same_host");  // which a reader would map without ever connecting
  Completion done;
  const auto start = Clock::now();
  const TransferId id = client_->submit(remote, {{0, 0, kMiB}}, done.callback());
  const TransferStatus status = client_->wait(id, 20s);
  EXPECT_LT(Clock::now() - start, 10s);
  EXPECT_EQ(status.state, TransferState::kFailed);
  EXPECT_CONTAINS(status.error, fmt::format("127.0.0.1:{}", port));
  EXPECT_EQ(done.calls, 1);
  // The peer that does answer is not affected.
  EXPECT_EQ(client_->wait(client_->submit(server_->endpoint(), {{0, 0, kMiB}}), 10s).state, TransferState::kDone);
}

// A batch large enough to be pending when cancel() comes: 64 MiB in 4 KiB reads that do not
// coalesce.
std::vector<ReadOp> large_batch() {
  std::vector<ReadOp> ops;
  const uint64_t count = 64 * kMiB / 4096;
  for (uint64_t i = 0; i < count; ++i) ops.push_back({i * 4096, (count - 1 - i) * 4096, 4096});
  return ops;
}

TEST_P(UcxTransportTest, CancelStopsALargeTransfer) {
  Completion done;
  const TransferId id = client_->submit(server_->endpoint(), large_batch(), done.callback());
  client_->cancel(id);
  const TransferStatus status = client_->poll(id);
  EXPECT_TRUE(status.state == TransferState::kCancelled || status.state == TransferState::kDone)
      << transfer_state_name(status.state);
  EXPECT_EQ(done.calls, 1);
  const std::vector<uint8_t> after_cancel(reader_.data.begin(), reader_.data.end());
  std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(std::equal(after_cancel.begin(), after_cancel.end(), reader_.data.begin()))
      << "bytes landed after cancel() returned";
  EXPECT_EQ(client_->poll(id).state, status.state);
  client_->cancel(id);  // a finished transfer: no-op
  EXPECT_EQ(client_->poll(id).state, status.state);
  EXPECT_EQ(done.calls, 1);
}

TEST_P(UcxTransportTest, ForgetDropsAFinishedStatus) {
  const TransferId id = client_->submit(server_->endpoint(), {{0, 0, 64}});
  ASSERT_EQ(client_->wait(id, 5s).state, TransferState::kDone);
  client_->forget(id);
  const TransferStatus status = client_->poll(id);
  EXPECT_EQ(status.state, TransferState::kFailed);
  EXPECT_CONTAINS(status.error, "unknown transfer");
}

TEST_P(UcxTransportTest, DestructionEndsPendingTransfers) {
  Completion first, second;
  const nlohmann::json remote = server_->endpoint();
  (void)client_->submit(remote, large_batch(), first.callback());
  (void)client_->submit(remote, {{0, 0, 8 * kMiB}}, second.callback());
  client_.reset();
  EXPECT_EQ(first.calls, 1);
  EXPECT_EQ(second.calls, 1);
  EXPECT_NE(first.status.state, TransferState::kPending);
  EXPECT_NE(second.status.state, TransferState::kPending);
}

TEST_P(UcxTransportTest, ReadsFromTwoPeers) {
  Region other_source(kMiB, 2);
  const std::unique_ptr<Transport> other = make(other_source);
  const ReadOp from_first{100, 0, 3000};
  const ReadOp from_second{100, 4000, 3000};
  const TransferId first = client_->submit(server_->endpoint(), {from_first});
  const TransferId second = client_->submit(other->endpoint(), {from_second});
  ASSERT_EQ(client_->wait(first, 5s).state, TransferState::kDone) << client_->poll(first).error;
  ASSERT_EQ(client_->wait(second, 5s).state, TransferState::kDone) << client_->poll(second).error;
  expect_landed(reader_, 1, from_first);
  expect_landed(reader_, 2, from_second);
}

TEST_P(UcxTransportTest, APeerGoingAwayEndsItsTransfers) {
  const std::string peer = fmt::format("127.0.0.1:{}", server_->endpoint().at("port").get<int>());
  Completion done;
  const TransferId id = client_->submit(server_->endpoint(), large_batch(), done.callback());
  server_.reset();
  const TransferStatus status = client_->wait(id, 10s);
  ASSERT_NE(status.state, TransferState::kPending);
  if (status.state == TransferState::kFailed) {
    EXPECT_CONTAINS(status.error, peer);
  }
  EXPECT_EQ(done.calls, 1);
}

TEST_P(UcxTransportTest, ReadsFromAPeerThatRestartedOnItsPort) {
  const uint16_t port = server_->endpoint().at("port");
  ASSERT_EQ(client_->wait(client_->submit(server_->endpoint(), {{0, 0, 64}}), 5s).state, TransferState::kDone);
  server_.reset();
  Region restarted(kMiB, 3);
  const auto again = make(restarted, port);
  // A read racing the client's notice of the old connection's end may fail; the next one
  // reconnects.
  const ReadOp op{0, 0, 4096};
  TransferStatus status = client_->wait(client_->submit(again->endpoint(), {op}), 5s);
  if (status.state == TransferState::kFailed) status = client_->wait(client_->submit(again->endpoint(), {op}), 5s);
  ASSERT_EQ(status.state, TransferState::kDone) << status.error;
  expect_landed(reader_, 3, op);
}

TEST_P(UcxTransportTest, ATakenPortIsAnError) {
  const uint16_t port = server_->endpoint().at("port");
  Region other(4096, 0);
  const std::string error =
      testing::error_of([&] { make(other, port); });
  EXPECT_CONTAINS(error, fmt::format("ucx: cannot listen on 127.0.0.1:{}: the address is in use", port));
}

// UCX variables set while it lives: UCX reads them when a transport starts.
class ScopedUcxEnv {
 public:
  explicit ScopedUcxEnv(std::vector<std::pair<const char*, const char*>> vars) : vars_(std::move(vars)) {
    for (const auto& [name, value] : vars_) setenv(name, value, 1);
  }
  ~ScopedUcxEnv() {
    for (const auto& [name, value] : vars_) unsetenv(name);
  }

 private:
  std::vector<std::pair<const char*, const char*>> vars_;
};

// Only TCP, as between hosts: the reader's gets are served by the peer's progress thread.
TEST(UcxTransportTcpTest, ReadsOverTcpAlone) {
  Region source(16 * kMiB, 4);
  Region reader(16 * kMiB, -1);
  std::unique_ptr<Transport> server, client;
  {
    // With the transport's shared-memory setting taken from here, UCX does not warn that
    // it found no shared memory to apply it to.
    const ScopedUcxEnv env({{"UCX_TLS", "tcp"}, {"UCX_MM_ERROR_HANDLING", "n"}});
    server = make_local(source);
    client = make_local(reader);
  }
  const std::vector<ReadOp> ops = {{0, 8 * kMiB, 8 * kMiB}, {12 * kMiB + 5, 5, 77777}};
  const TransferStatus status = client->wait(client->submit(server->endpoint(), ops), 10s);
  ASSERT_EQ(status.state, TransferState::kDone) << status.error;
  for (const ReadOp& op : ops) expect_landed(reader, 4, op);
}

}  // namespace
}  // namespace moe::disagg
