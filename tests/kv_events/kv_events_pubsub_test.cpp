// Publisher and subscriber over real ZeroMQ sockets on the loopback: a subscriber that
// joins late or loses messages asks for a snapshot and ends up with exactly the blocks the
// publishing side holds; malformed messages and removed instances are handled. Whether the
// first messages reach a new subscriber depends on timing, so the tests only ask that it
// converges, as a router would.
#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <zmq.hpp>

#include "core/error.h"
#include "kv_events/publisher.h"
#include "kv_events/subscriber.h"
#include "kv_events/wire.h"

namespace moe::kv_events {
namespace {

using namespace std::chrono_literals;

bool eventually(const std::function<bool()>& done, std::chrono::milliseconds limit = 10s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return done();
}

// What an engine instance does: holds blocks, publishes each change, answers snapshots
// consistent with what it published (all on the test's thread).
struct FakeInstance {
  explicit FakeInstance(const std::string& id) : pub(PublisherConfig{"tcp://127.0.0.1:*", id}) { pub.publish(++seq, {AllCleared{}}); }
  void store(std::vector<uint64_t> hashes) {
    blocks.insert(hashes.begin(), hashes.end());
    pub.publish(++seq, {BlocksStored{std::nullopt, std::move(hashes), 16}});
  }
  void remove(std::vector<uint64_t> hashes) {
    for (uint64_t h : hashes) blocks.erase(h);
    pub.publish(++seq, {BlocksRemoved{std::move(hashes)}});
  }
  KvSnapshot snapshot() const { return KvSnapshot{seq, 16, {blocks.begin(), blocks.end()}}; }

  KvEventPublisher pub;
  uint64_t seq = 0;
  std::set<uint64_t> blocks;
};

// The resync requests the subscriber made, answered by the test's thread as a proxy would
// answer them after fetching /internal/kv/blocks.
struct Requests {
  std::mutex mu;
  std::deque<std::string> ids;
  size_t total = 0;
  void push(const std::string& id) {
    std::lock_guard lk(mu);
    ids.push_back(id);
    ++total;
  }
  void answer(KvEventSubscriber& sub, const std::string& id, const FakeInstance& inst) {
    std::deque<std::string> now;
    {
      std::lock_guard lk(mu);
      now.swap(ids);
    }
    for (const std::string& r : now) {
      if (r == id) (void)sub.resync(id, inst.snapshot());
    }
  }
  size_t count() {
    std::lock_guard lk(mu);
    return total;
  }
};

bool holds_exactly(const KvEventSubscriber& sub, const std::string& id, const std::set<uint64_t>& blocks) {
  if (sub.n_blocks(id) != blocks.size()) return false;
  for (uint64_t h : blocks) {
    if (sub.matched_blocks(id, std::span(&h, 1)) != 1) return false;
  }
  return true;
}

// Until the subscriber holds exactly the instance's blocks and is in sync, answering its
// requests. A snapshot alone does not prove the stream reaches the subscriber (messages
// sent before the connection is up are lost, and nobody knows until the next one), so
// every round stores a new block after answering: holding it means the stream works.
bool converge(KvEventSubscriber& sub, Requests& req, const std::string& id, FakeInstance& inst, uint64_t& next_hash) {
  return eventually([&] {
    req.answer(sub, id, inst);
    inst.store({next_hash++});
    std::this_thread::sleep_for(20ms);
    return sub.synced(id) && holds_exactly(sub, id, inst.blocks);
  });
}

TEST(KvPubSub, ASubscriberCatchesUpAndThenFollowsTheStream) {
  FakeInstance inst("moe-a");
  inst.store({1, 2, 3});
  Requests req;
  KvEventSubscriber sub([&](const std::string& id) { req.push(id); });
  sub.add_instance("moe-a", inst.pub.endpoint());
  uint64_t next = 100;
  ASSERT_TRUE(converge(sub, req, "moe-a", inst, next));
  EXPECT_EQ(sub.matched_blocks("moe-a", std::vector<uint64_t>{1, 2, 3, 4}), 3u);

  // In sync, the stream alone keeps the index current.
  inst.remove({2});
  inst.store({4});
  ASSERT_TRUE(eventually([&] { return holds_exactly(sub, "moe-a", inst.blocks); }));
  EXPECT_EQ(sub.matched_blocks("moe-a", std::vector<uint64_t>{1, 2, 3}), 1u);
  EXPECT_TRUE(sub.synced("moe-a"));
  EXPECT_EQ(sub.block_size("moe-a"), 16);

  // A lost message (the instance numbered one it never sent) is a gap: a snapshot is asked
  // for, and the index comes back to the instance's state.
  const size_t asked = req.count();
  ++inst.seq;
  inst.store({5});
  ASSERT_TRUE(eventually([&] { return req.count() > asked; })) << "the gap went unnoticed";
  ASSERT_TRUE(converge(sub, req, "moe-a", inst, next));
  EXPECT_EQ(sub.matched_blocks("moe-a", std::vector<uint64_t>{1, 2}), 1u);

  sub.remove_instance("moe-a");
  EXPECT_EQ(sub.n_blocks("moe-a"), 0u);
  EXPECT_TRUE(sub.matches(std::vector<uint64_t>{1}).empty());
}

TEST(KvPubSub, SeveralInstancesOnOneSubscriber) {
  FakeInstance a("moe-a"), b("moe-b");
  Requests req_a, req_b;
  KvEventSubscriber sub([&](const std::string& id) { (id == "moe-a" ? req_a : req_b).push(id); });
  sub.add_instance("moe-a", a.pub.endpoint());
  sub.add_instance("moe-b", b.pub.endpoint());
  uint64_t next_a = 1000, next_b = 2000;
  a.store({1, 2});
  b.store({1});
  ASSERT_TRUE(converge(sub, req_a, "moe-a", a, next_a));
  ASSERT_TRUE(converge(sub, req_b, "moe-b", b, next_b));
  EXPECT_EQ(sub.matches(std::vector<uint64_t>{1, 2, 3}), (std::vector<KvIndex::Match>{{"moe-a", 2}, {"moe-b", 1}}));
}

TEST(KvPubSub, AMalformedMessageLosesSyncAndABadEndpointIsRefused) {
  zmq::context_t ctx;
  zmq::socket_t raw(ctx, zmq::socket_type::pub);
  raw.bind("tcp://127.0.0.1:*");
  const std::string endpoint = raw.get(zmq::sockopt::last_endpoint);
  Requests req;
  KvEventSubscriber sub([&](const std::string& id) { req.push(id); });
  sub.add_instance("moe-raw", endpoint);
  // Nothing was published: only a snapshot can tell what the instance holds.
  ASSERT_TRUE(eventually([&] { return req.count() > 0; })) << "no snapshot was asked for on add";
  const auto send = [&](const std::string& seq, const std::string& payload) {
    const std::string topic = topic_of("moe-raw");
    raw.send(zmq::buffer(topic), zmq::send_flags::sndmore);
    raw.send(zmq::buffer(seq), zmq::send_flags::sndmore);
    raw.send(zmq::buffer(payload), zmq::send_flags::none);
  };
  // Repeated until the subscription has reached the publisher.
  ASSERT_TRUE(eventually([&] {
    send(encode_seq(1), encode_events(std::vector<KvEvent>{AllCleared{}}));
    std::this_thread::sleep_for(20ms);
    return sub.synced("moe-raw");
  }));
  const size_t asked = req.count();
  send(encode_seq(2), "{\"events\": [{\"type\": \"stored\"}]}");
  ASSERT_TRUE(eventually([&] { return !sub.synced("moe-raw") && req.count() > asked; }));
  EXPECT_TRUE(sub.resync("moe-raw", KvSnapshot{2, 16, {7}}));
  EXPECT_EQ(sub.n_blocks("moe-raw"), 1u);

  EXPECT_THROW(sub.add_instance("moe-bad", "not-an-endpoint"), Error);
  EXPECT_THROW(KvEventPublisher(PublisherConfig{"bogus://x", "moe-bad"}), Error);
}

}  // namespace
}  // namespace moe::kv_events
