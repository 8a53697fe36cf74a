// The subscriber's index of which blocks each instance holds: applying messages in order,
// noticing gaps, resyncing from a snapshot with the messages that arrived meanwhile, and
// the longest-held-prefix query the router asks.
#include "kv_events/kv_index.h"

#include <gtest/gtest.h>

namespace moe::kv_events {
namespace {

std::vector<KvEvent> stored(std::vector<uint64_t> hashes, std::optional<uint64_t> parent = std::nullopt) {
  return {BlocksStored{parent, std::move(hashes), 16}};
}
std::vector<KvEvent> removed(std::vector<uint64_t> hashes) { return {BlocksRemoved{std::move(hashes)}}; }
std::vector<KvEvent> cleared() { return {AllCleared{}}; }

TEST(KvIndex, AStreamFromSeqOneIsAppliedInOrder) {
  KvIndex index;
  index.add("a");
  EXPECT_FALSE(index.synced("a"));
  EXPECT_EQ(index.out_of_sync(), std::vector<std::string>{"a"});
  EXPECT_FALSE(index.apply("a", 1, cleared()));
  EXPECT_TRUE(index.synced("a"));
  EXPECT_FALSE(index.apply("a", 2, stored({10, 11, 12})));
  EXPECT_FALSE(index.apply("a", 3, removed({12})));
  EXPECT_EQ(index.n_blocks("a"), 2u);
  EXPECT_EQ(index.block_size("a"), 16);
  EXPECT_FALSE(index.apply("a", 4, cleared()));
  EXPECT_EQ(index.n_blocks("a"), 0u);
  EXPECT_TRUE(index.out_of_sync().empty());
  // Unknown instances are ignored.
  EXPECT_FALSE(index.apply("b", 1, stored({1})));
  EXPECT_FALSE(index.has("b"));
}

TEST(KvIndex, AGapAsksForOneResyncAndHoldsLaterMessages) {
  KvIndex index;
  index.add("a");
  ASSERT_FALSE(index.apply("a", 1, cleared()));
  ASSERT_FALSE(index.apply("a", 2, stored({10})));
  EXPECT_TRUE(index.apply("a", 4, stored({12}, 11)));  // 3 was lost
  EXPECT_FALSE(index.synced("a"));
  EXPECT_FALSE(index.apply("a", 5, stored({13}, 12)));  // already asked
  // Out of sync, queries answer from the blocks last known.
  EXPECT_EQ(index.n_blocks("a"), 1u);
  // The snapshot was taken after message 4: 5 is replayed, 4 is in it already.
  EXPECT_TRUE(index.reset("a", KvSnapshot{4, 16, {10, 11, 12}}));
  EXPECT_TRUE(index.synced("a"));
  EXPECT_EQ(index.n_blocks("a"), 4u);
  EXPECT_FALSE(index.apply("a", 6, removed({10})));
  EXPECT_EQ(index.n_blocks("a"), 3u);
  // A late answer to an earlier request is older than what the stream brought.
  EXPECT_TRUE(index.reset("a", KvSnapshot{5, 16, {10}}));
  EXPECT_EQ(index.n_blocks("a"), 3u);
  EXPECT_FALSE(index.apply("a", 7, stored({20})));
  EXPECT_TRUE(index.synced("a"));
}

TEST(KvIndex, ASnapshotThatHeldMessagesDoNotContinueNeedsAnother) {
  KvIndex index;
  index.add("a");
  EXPECT_FALSE(index.apply("a", 7, stored({1})));  // joined late: already out of sync
  EXPECT_FALSE(index.apply("a", 9, stored({3})));
  // Message 8 was never seen: the snapshot at 6 cannot be brought forward.
  EXPECT_FALSE(index.reset("a", KvSnapshot{6, 16, {}}));
  EXPECT_FALSE(index.synced("a"));
  EXPECT_TRUE(index.reset("a", KvSnapshot{9, 16, {1, 2, 3}}));
  EXPECT_TRUE(index.synced("a"));
  EXPECT_FALSE(index.apply("a", 10, stored({4})));
  EXPECT_EQ(index.n_blocks("a"), 4u);
  EXPECT_FALSE(index.reset("nobody", KvSnapshot{}));
}

TEST(KvIndex, SeqOneStartsOverAndUndecodableMessagesLoseSync) {
  KvIndex index;
  index.add("a");
  ASSERT_FALSE(index.apply("a", 1, cleared()));
  ASSERT_FALSE(index.apply("a", 2, stored({1, 2})));
  // The instance restarted under the same id: its first message clears what was known.
  EXPECT_FALSE(index.apply("a", 1, cleared()));
  EXPECT_TRUE(index.synced("a"));
  EXPECT_EQ(index.n_blocks("a"), 0u);
  EXPECT_TRUE(index.lose_sync("a"));
  EXPECT_FALSE(index.lose_sync("a"));
  EXPECT_FALSE(index.apply("a", 2, stored({1})));
  EXPECT_TRUE(index.reset("a", KvSnapshot{1, 16, {}}));
  EXPECT_EQ(index.n_blocks("a"), 1u);
  // A message that repeats or goes back (not 1) is a gap too.
  EXPECT_TRUE(index.apply("a", 2, stored({5})));
}

TEST(KvIndex, HeldMessagesAreBounded) {
  KvIndex index;
  index.add("a");
  for (uint64_t s = 2; s < 2 + KvIndex::kMaxHeld + 10; ++s) (void)index.apply("a", s, stored({s}));
  // The oldest held ones were dropped: a snapshot from before them cannot be continued.
  EXPECT_FALSE(index.reset("a", KvSnapshot{1, 16, {}}));
  EXPECT_TRUE(index.reset("a", KvSnapshot{KvIndex::kMaxHeld + 11, 16, {}}));
}

TEST(KvIndex, MatchedBlocksIsTheLongestFullyHeldPrefix) {
  KvIndex index;
  index.add("a");
  index.add("b");
  ASSERT_FALSE(index.apply("a", 1, stored({1, 2, 3, 4})));
  ASSERT_FALSE(index.apply("b", 1, stored({1, 2, 5})));
  const std::vector<uint64_t> prompt{1, 2, 3, 4, 6};
  EXPECT_EQ(index.matched_blocks("a", prompt), 4u);
  EXPECT_EQ(index.matched_blocks("b", prompt), 2u);
  EXPECT_EQ(index.matched_blocks("nobody", prompt), 0u);
  // A later block held without its predecessors does not count.
  EXPECT_EQ(index.matched_blocks("a", std::vector<uint64_t>{9, 2, 3}), 0u);
  EXPECT_EQ(index.matched_blocks("a", std::vector<uint64_t>{}), 0u);
  EXPECT_EQ(index.matches(prompt), (std::vector<KvIndex::Match>{{"a", 4}, {"b", 2}}));
  index.remove("a");
  EXPECT_EQ(index.matches(prompt), (std::vector<KvIndex::Match>{{"b", 2}}));
}

}  // namespace
}  // namespace moe::kv_events
