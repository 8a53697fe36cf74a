// `moengine serve --kv-events-endpoint` as a real process: a completion's prompt blocks
// are published with exactly the hashes a router computes from the prompt's token ids,
// GET /internal/kv/blocks agrees with the stream, and a KvEventSubscriber following the
// instance can tell how much of a new prompt it holds.
#include <gtest/gtest.h>

#include <deque>
#include <filesystem>
#include <mutex>
#include <zmq.hpp>

#include "core/block_hash.h"
#include "kv_events/subscriber.h"
#include "kv_events/wire.h"
#include "support/http_calls.h"
#include "support/run_cli.h"
#include "support/serve_process.h"

namespace moe::kv_events {
namespace {

using nlohmann::json;
using moe::testing::ServeProcess;
using namespace std::chrono_literals;

constexpr const char* kEngineId = "moe-kv-events-test";

std::string dir() { return moe::testing::test_dir("kv_events_serve"); }

std::string model() {
  const std::string path = dir() + "/tiny.gguf";
  if (std::filesystem::exists(path)) return path;
  const moe::testing::CliResult r = moe::testing::run_moengine("gen-model --arch deepseek2 --preset tiny --type q8_0 --out " + path);
  if (r.status != 0) throw std::runtime_error(r.out);
  return path;
}

std::unique_ptr<ServeProcess> serve(const std::string& name, std::vector<std::string> extra) {
  std::vector<std::string> args{"--model", model(), "--port", "0", "--served-model-name", "tiny", "--kv-cache-memory", "0.05",
                                "--block-size", "16", "--engine-id", kEngineId};
  args.insert(args.end(), extra.begin(), extra.end());
  auto p = std::make_unique<ServeProcess>(args, dir() + "/" + name + ".log");
  if (p->url().empty()) throw std::runtime_error(name + " never became ready:\n" + p->log());
  return p;
}

// The endpoint serve printed on start ("KV events on tcp://...:PORT (topic ...)").
std::string published_endpoint(const ServeProcess& p) {
  const std::string log = p.log();
  const std::string key = "KV events on ";
  const size_t at = log.find(key);
  if (at == std::string::npos) return "";
  const size_t end = log.find(' ', at + key.size());
  return log.substr(at + key.size(), end - at - key.size());
}

std::vector<int32_t> tokenize(const std::string& url, const std::string& text) {
  const moe::testing::Reply r = moe::testing::post_json(url, "/tokenize", json{{"model", "tiny"}, {"prompt", text}});
  if (r.status != 200) throw std::runtime_error(r.body);
  return r.json()["tokens"].get<std::vector<int32_t>>();
}

json complete(const std::string& url, const json& prompt) {
  const moe::testing::Reply r =
      moe::testing::post_json(url, "/v1/completions", json{{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", 1}, {"temperature", 0}});
  if (r.status != 200) throw std::runtime_error(r.body);
  return r.json();
}

NamedSnapshot blocks_of(const std::string& url) {
  const moe::testing::Reply r = moe::testing::get(url, "/internal/kv/blocks");
  if (r.status != 200) throw std::runtime_error(r.body);
  return decode_snapshot(r.body);
}

struct Message {
  std::string topic;
  uint64_t seq = 0;
  std::vector<KvEvent> events;
};

// The next message on a raw SUB socket, or nullopt after its receive timeout.
std::optional<Message> receive(zmq::socket_t& sub) {
  std::vector<std::string> frames;
  bool more = true;
  while (more) {
    zmq::message_t part;
    if (!sub.recv(part)) return std::nullopt;
    frames.push_back(part.to_string());
    more = part.more();
  }
  if (frames.size() != 3) throw std::runtime_error("a message of " + std::to_string(frames.size()) + " frames");
  const std::optional<uint64_t> seq = decode_seq(frames[1]);
  if (!seq) throw std::runtime_error("a bad sequence number frame");
  return Message{frames[0], *seq, decode_events(frames[2])};
}

TEST(KvEventsServe, StoredBlocksCarryTheRoutersHashesAndTheSnapshotAgrees) {
  auto s = serve("events", {"--kv-events-endpoint", "tcp://127.0.0.1:*"});
  const std::string url = s->url();
  const std::string endpoint = published_endpoint(*s);
  ASSERT_FALSE(endpoint.empty()) << s->log();
  EXPECT_NE(s->log().find("topic kv@" + std::string(kEngineId)), std::string::npos) << s->log();

  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::rcvtimeo, 300);
  sub.set(zmq::sockopt::subscribe, topic_of(kEngineId));
  sub.connect(endpoint);
  // A subscription takes effect a little after connecting: send multi-block prompts until
  // one's events come through, then read everything already on the way.
  std::optional<Message> m;
  for (int probe = 0; probe < 50 && !m; ++probe) {
    complete(url, "probe " + std::to_string(probe) + " of the subscription with a prompt long enough to fill some blocks of sixteen");
    m = receive(sub);
  }
  ASSERT_TRUE(m) << "no KV event arrived\n" << s->log();
  uint64_t last_seq = m->seq;
  while ((m = receive(sub))) last_seq = m->seq;

  const std::string text =
      "The experts of the mixture take turns: each token goes to the few whose gate scores it highest, and the "
      "router balances the load across the devices that hold them";
  const std::vector<int32_t> ids = tokenize(url, text);
  const std::vector<uint64_t> hashes = prompt_block_hashes(ids, 16);
  ASSERT_GE(hashes.size(), 2u) << ids.size() << " tokens";
  const json answer = complete(url, text);
  EXPECT_EQ(answer["usage"]["prompt_tokens"], ids.size());

  m = receive(sub);
  ASSERT_TRUE(m) << "the completion's blocks were not published";
  EXPECT_EQ(m->topic, topic_of(kEngineId));
  EXPECT_EQ(m->seq, last_seq + 1);
  EXPECT_EQ(m->events, (std::vector<KvEvent>{BlocksStored{std::nullopt, hashes, 16}}));

  const NamedSnapshot snap = blocks_of(url);
  EXPECT_EQ(snap.engine_id, kEngineId);
  EXPECT_EQ(snap.snapshot.seq, m->seq);
  EXPECT_EQ(snap.snapshot.block_size, 16);
  for (uint64_t h : hashes) EXPECT_NE(std::find(snap.snapshot.hashes.begin(), snap.snapshot.hashes.end(), h), snap.snapshot.hashes.end());

  // A subscriber as the proxy runs one: it resyncs from the route and then follows the
  // stream, so a prompt sharing the first two blocks is seen to match exactly those.
  std::mutex mu;
  std::deque<std::string> asked;
  KvEventSubscriber follower([&](const std::string& id) {
    std::lock_guard lk(mu);
    asked.push_back(id);
  });
  follower.add_instance(kEngineId, endpoint);
  std::vector<int32_t> other(ids.begin(), ids.begin() + 32);
  for (int32_t t = 0; t < 20; ++t) other.push_back(100 + t);
  const std::vector<uint64_t> other_hashes = prompt_block_hashes(other, 16);
  bool sent_other = false;
  const auto end = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < end) {
    std::deque<std::string> now;
    {
      std::lock_guard lk(mu);
      now.swap(asked);
    }
    for (const std::string& id : now) (void)follower.resync(id, blocks_of(url).snapshot);
    if (follower.synced(kEngineId) && follower.matched_blocks(kEngineId, hashes) == hashes.size()) {
      if (!sent_other) {
        EXPECT_EQ(follower.matched_blocks(kEngineId, other_hashes), 2u);
        complete(url, other);
        sent_other = true;
      } else if (follower.matched_blocks(kEngineId, other_hashes) == other_hashes.size()) {
        break;
      }
    }
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(sent_other);
  EXPECT_EQ(follower.matched_blocks(kEngineId, other_hashes), other_hashes.size());
  EXPECT_EQ(follower.block_size(kEngineId), 16);
  EXPECT_EQ(s->stop(), 0) << s->log();
}

TEST(KvEventsServe, OffByDefaultAndABadEndpointIsRefusedAtStart) {
  auto s = serve("no-events", {});
  const moe::testing::Reply r = moe::testing::get(s->url(), "/internal/kv/blocks");
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_EQ(r.json()["error"]["code"], "kv_events_off") << r.body;
  EXPECT_EQ(s->stop(), 0) << s->log();

  const moe::testing::CliResult bad = moe::testing::run_moengine("serve --model " + model() + " --port 0 --kv-cache-memory 0.05 --kv-events-endpoint bogus://nowhere");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("cannot bind a ZeroMQ PUB socket to 'bogus://nowhere'"), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace moe::kv_events
