// The engine's side of KV events: the shared block hash is the one the prefix cache indexes
// by, the block manager logs exactly the index's changes, and AsyncEngine numbers its
// messages so that a snapshot agrees with them.
#include <gtest/gtest.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <condition_variable>
#include <future>
#include <mutex>
#include <numeric>

#include "core/block_hash.h"
#include "engine/async_engine.h"
#include "engine/block_manager.h"
#include "engine/test_models.h"
#include "tokenizer/gguf_vocab.h"

namespace moe {
namespace {

using kv_events::AllCleared;
using kv_events::BlocksRemoved;
using kv_events::BlocksStored;
using kv_events::KvEvent;

std::vector<int32_t> tokens_from(int n, int32_t start) {
  std::vector<int32_t> t(size_t(n), 0);
  std::iota(t.begin(), t.end(), start);
  return t;
}

std::vector<uint64_t> sorted(std::vector<uint64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(BlockHash, IsTheXxh3ChainSeededByTheParent) {
  const std::vector<int32_t> t = tokens_from(10, 7);
  const uint64_t h0 = XXH3_64bits_withSeed(t.data(), 4 * sizeof(int32_t), 0);
  const uint64_t h1 = XXH3_64bits_withSeed(t.data() + 4, 4 * sizeof(int32_t), h0);
  EXPECT_EQ(block_hash(kRootParentHash, t.data(), 4), h0);
  EXPECT_EQ(prompt_block_hashes(t, 4), (std::vector<uint64_t>{h0, h1}));  // the partial block has none
  EXPECT_TRUE(prompt_block_hashes(std::span(t).first(3), 4).empty());
  EXPECT_TRUE(prompt_block_hashes(t, 0).empty());
}

TEST(BlockManagerEvents, StoredChainsAndEvictionsAreLoggedWithTheSharedHashes) {
  BlockManager bm(4, 4);
  bm.record_events();
  const std::vector<int32_t> a = tokens_from(11, 100);  // 2 full blocks and a partial one
  const std::vector<uint64_t> ha = prompt_block_hashes(a, 4);
  ASSERT_TRUE(bm.allocate_with_prefix(1, a));
  bm.commit_full_blocks(1, a);
  EXPECT_EQ(bm.take_events(), (std::vector<KvEvent>{BlocksStored{std::nullopt, ha, 4}}));
  EXPECT_EQ(sorted(bm.cached_hashes()), sorted(ha));

  // Shares a's first block, then goes its own way: only its new blocks are stored, as a
  // chain hanging off the shared one.
  std::vector<int32_t> b(a.begin(), a.begin() + 4);
  for (int32_t t : tokens_from(5, 900)) b.push_back(t);
  const std::vector<uint64_t> hb = prompt_block_hashes(b, 4);
  ASSERT_EQ(hb[0], ha[0]);
  bm.free(1);
  ASSERT_EQ(bm.allocate_with_prefix(2, b), 4);
  bm.commit_full_blocks(2, b);
  EXPECT_EQ(bm.take_events(), (std::vector<KvEvent>{BlocksStored{ha[0], {hb[1]}, 4}}));
  EXPECT_TRUE(bm.take_events().empty());

  // A sequence that needs every block evicts all cached ones: one removal event.
  bm.free(2);
  ASSERT_TRUE(bm.append(3, 16));
  const std::vector<KvEvent> evicted = bm.take_events();
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(sorted(std::get<BlocksRemoved>(evicted[0]).hashes), sorted({ha[0], ha[1], hb[1]}));
  EXPECT_TRUE(bm.cached_hashes().empty());
  EXPECT_EQ(bm.validate(), "");
}

TEST(BlockManagerEvents, NothingIsLoggedUnlessAsked) {
  BlockManager bm(4, 4);
  const std::vector<int32_t> a = tokens_from(8, 1);
  ASSERT_TRUE(bm.allocate_with_prefix(1, a));
  bm.commit_full_blocks(1, a);
  EXPECT_TRUE(bm.take_events().empty());
  EXPECT_EQ(bm.cached_hashes().size(), 2u);
}

// The messages an AsyncEngine hands its sink, as the engine thread gives them.
struct Sink {
  std::mutex mu;
  std::vector<std::pair<uint64_t, std::vector<KvEvent>>> messages;
  void operator()(uint64_t seq, std::vector<KvEvent> events) {
    std::lock_guard lk(mu);
    messages.emplace_back(seq, std::move(events));
  }
  std::vector<std::pair<uint64_t, std::vector<KvEvent>>> take() {
    std::lock_guard lk(mu);
    return std::exchange(messages, {});
  }
};

kv_events::KvSnapshot snapshot_of(AsyncEngine& engine) {
  std::promise<kv_events::KvSnapshot> p;
  EXPECT_TRUE(engine.kv_snapshot([&](kv_events::KvSnapshot s) { p.set_value(std::move(s)); }));
  return p.get_future().get();
}

void run_to_end(AsyncEngine& engine, std::vector<int32_t> prompt) {
  std::promise<void> done;
  GenerateParams params;
  params.sampling.temperature = 0.0f;
  params.max_tokens = 1;
  const auto id = engine.submit(std::move(prompt), params, [&](RequestOutput&& o) {
    if (o.finished) done.set_value();
  });
  ASSERT_TRUE(id);
  done.get_future().get();
}

TEST(AsyncEngineKvEvents, MessagesAreNumberedAndTheSnapshotAgreesWithThem) {
  GenSpec spec = gen_preset(Arch::Deepseek2, "tiny");
  spec.type = GgmlType::Q8_0;
  const std::string path = testing::write_model(spec, "kv_events_engine_tiny");
  std::unique_ptr<Model> model = Model::load(path);
  const Tokenizer tok(load_tokenizer(path));

  Sink sink;
  AsyncEngineConfig c;
  c.engine.n_blocks = 64;
  c.engine.block_size = 16;
  c.threads = 1;
  c.kv_event_sink = [&sink](uint64_t seq, std::vector<KvEvent> events) { sink(seq, std::move(events)); };
  AsyncEngine engine(*model, tok, c);
  ASSERT_TRUE(engine.publishes_kv_events());

  const std::vector<int32_t> prompt = tokens_from(40, 3);  // 2 full blocks
  const std::vector<uint64_t> hashes = prompt_block_hashes(prompt, 16);
  run_to_end(engine, prompt);
  kv_events::KvSnapshot snap = snapshot_of(engine);
  auto got = sink.take();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].first, 1u);
  EXPECT_EQ(got[0].second, std::vector<KvEvent>{AllCleared{}});
  EXPECT_EQ(got[1].first, 2u);
  EXPECT_EQ(got[1].second, (std::vector<KvEvent>{BlocksStored{std::nullopt, hashes, 16}}));
  EXPECT_EQ(snap.seq, 2u);
  EXPECT_EQ(snap.block_size, 16);
  EXPECT_EQ(sorted(snap.hashes), sorted(hashes));

  // The same first block, then another: one new block, child of the shared one.
  std::vector<int32_t> other(prompt.begin(), prompt.begin() + 16);
  for (int32_t t : tokens_from(20, 200)) other.push_back(t);
  run_to_end(engine, other);
  snap = snapshot_of(engine);
  got = sink.take();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, 3u);
  EXPECT_EQ(got[0].second, (std::vector<KvEvent>{BlocksStored{hashes[0], {prompt_block_hashes(other, 16)[1]}, 16}}));
  EXPECT_EQ(snap.seq, 3u);
  EXPECT_EQ(snap.hashes.size(), 3u);
}

TEST(AsyncEngineKvEvents, WithoutASinkTheSnapshotStillAnswers) {
  GenSpec spec = gen_preset(Arch::Deepseek2, "tiny");
  spec.type = GgmlType::Q8_0;
  const std::string path = testing::write_model(spec, "kv_events_engine_tiny");
  std::unique_ptr<Model> model = Model::load(path);
  const Tokenizer tok(load_tokenizer(path));
  AsyncEngineConfig c;
  c.engine.n_blocks = 64;
  c.threads = 1;
  AsyncEngine engine(*model, tok, c);
  EXPECT_FALSE(engine.publishes_kv_events());
  run_to_end(engine, tokens_from(40, 3));
  const kv_events::KvSnapshot snap = snapshot_of(engine);
  EXPECT_EQ(snap.seq, 0u);
  EXPECT_EQ(snap.hashes.size(), 2u);
}

}  // namespace
}  // namespace moe
