// The paged KV block manager and its prefix cache: allocation, sharing by ref count,
// LRU eviction of released cached blocks, accounting, and a randomized stress run that
// checks the block-state invariants after every operation.
#include "engine/block_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

namespace moe {
namespace {

std::vector<int32_t> iota_tokens(int n, int32_t start = 100) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

// The check every test ends with: the manager's own consistency plus "every block is
// exactly one of free, evictable or referenced".
void expect_consistent(const BlockManager& bm) {
  EXPECT_EQ(bm.validate(), "");
  EXPECT_EQ(bm.n_free() + bm.n_evictable() + bm.n_used(), bm.n_blocks());
}

TEST(BlockManager, AppendAllocatesByBlockAndFreeReturnsEveryBlock) {
  BlockManager bm(8, 4);
  ASSERT_TRUE(bm.append(1, 1));
  EXPECT_EQ(bm.table(1).size(), 1u);
  ASSERT_TRUE(bm.append(1, 3));  // fills block 0 exactly
  EXPECT_EQ(bm.table(1).size(), 1u);
  ASSERT_TRUE(bm.append(1, 1));  // position 4 opens a second block
  EXPECT_EQ(bm.table(1).size(), 2u);
  EXPECT_EQ(bm.num_tokens(1), 5);
  ASSERT_TRUE(bm.append(2, 9));
  EXPECT_EQ(bm.table(2).size(), 3u);
  EXPECT_EQ(bm.n_used(), 5);
  std::set<int32_t> all(bm.table(1).begin(), bm.table(1).end());
  all.insert(bm.table(2).begin(), bm.table(2).end());
  EXPECT_EQ(all.size(), 5u);  // no block handed out twice
  expect_consistent(bm);
  bm.free(1);
  bm.free(2);
  bm.free(3);  // unknown: a no-op
  EXPECT_EQ(bm.n_free(), 8);
  EXPECT_EQ(bm.n_used(), 0);
  EXPECT_FALSE(bm.has(1));
  expect_consistent(bm);
}

TEST(BlockManager, OutOfBlocksIsReportedAndChangesNothing) {
  BlockManager bm(3, 4);
  ASSERT_TRUE(bm.append(1, 8));
  EXPECT_TRUE(bm.can_append(1, 4));
  EXPECT_FALSE(bm.can_append(1, 5));
  EXPECT_FALSE(bm.append(1, 5));
  EXPECT_EQ(bm.num_tokens(1), 8);
  EXPECT_EQ(bm.table(1).size(), 2u);
  EXPECT_FALSE(bm.can_append(2, 5));
  EXPECT_FALSE(bm.append(2, 5));
  EXPECT_FALSE(bm.has(2));
  EXPECT_FALSE(bm.allocate_with_prefix(3, iota_tokens(5)).has_value());
  EXPECT_FALSE(bm.has(3));
  EXPECT_EQ(bm.prefix_queries(), 0u);  // a refused request is not counted
  ASSERT_TRUE(bm.append(1, 4));
  EXPECT_EQ(bm.n_available(), 0);
  EXPECT_FALSE(bm.append(1, 1));
  expect_consistent(bm);
}

TEST(BlockManager, SharedPrefixIsRefCountedAndSurvivesTheOtherSequence) {
  BlockManager bm(16, 4);
  const std::vector<int32_t> prompt = iota_tokens(10);  // blocks [0..3] [4..7] [8, 9]
  ASSERT_EQ(bm.allocate_with_prefix(1, prompt), 0);
  bm.commit_full_blocks(1, prompt);
  const std::vector<int32_t> t1 = bm.table(1);
  EXPECT_TRUE(bm.is_cached(t1[0]));
  EXPECT_TRUE(bm.is_cached(t1[1]));
  EXPECT_FALSE(bm.is_cached(t1[2]));  // partial: never cached

  std::vector<int32_t> other = iota_tokens(8);
  other.push_back(7);
  other.push_back(7);
  other.push_back(7);
  EXPECT_EQ(bm.match_prefix(other), 8);
  ASSERT_EQ(bm.allocate_with_prefix(2, other), 8);
  const std::vector<int32_t>& t2 = bm.table(2);
  ASSERT_EQ(t2.size(), 3u);
  EXPECT_EQ(t2[0], t1[0]);
  EXPECT_EQ(t2[1], t1[1]);
  EXPECT_NE(t2[2], t1[2]);  // the partial tail is private
  EXPECT_EQ(bm.ref_count(t1[0]), 2);
  EXPECT_EQ(bm.ref_count(t1[1]), 2);
  EXPECT_EQ(bm.ref_count(t1[2]), 1);
  EXPECT_EQ(bm.n_used(), 4);
  expect_consistent(bm);

  bm.free(1);
  EXPECT_EQ(bm.table(2)[0], t1[0]);
  EXPECT_EQ(bm.ref_count(t1[0]), 1);
  EXPECT_EQ(bm.ref_count(t1[1]), 1);
  EXPECT_EQ(bm.ref_count(t1[2]), 0);
  EXPECT_EQ(bm.n_used(), 3);  // seq 2: two shared blocks and its private tail
  EXPECT_TRUE(bm.is_cached(t1[0]));
  expect_consistent(bm);
}

TEST(BlockManager, FullyCachedPromptKeepsItsLastBlockPrivate) {
  BlockManager bm(8, 4);
  const std::vector<int32_t> prompt = iota_tokens(8);
  ASSERT_EQ(bm.allocate_with_prefix(1, prompt), 0);
  bm.commit_full_blocks(1, prompt);
  // Both blocks are cached, but one token must be left to prefill: only block 0 is shared.
  EXPECT_EQ(bm.match_prefix(prompt), 4);
  ASSERT_EQ(bm.allocate_with_prefix(2, prompt), 4);
  EXPECT_EQ(bm.table(2)[0], bm.table(1)[0]);
  EXPECT_NE(bm.table(2)[1], bm.table(1)[1]);
  // One token more and both full blocks are shared.
  std::vector<int32_t> longer = prompt;
  longer.push_back(1);
  EXPECT_EQ(bm.match_prefix(longer), 8);
  EXPECT_EQ(bm.match_prefix({}), 0);
  expect_consistent(bm);
}

TEST(BlockManager, WithoutPrefixCachingNothingIsSharedOrKept) {
  BlockManager bm(8, 4, false);
  const std::vector<int32_t> prompt = iota_tokens(9);
  ASSERT_EQ(bm.allocate_with_prefix(1, prompt), 0);
  bm.commit_full_blocks(1, prompt);
  ASSERT_EQ(bm.allocate_with_prefix(2, prompt), 0);
  EXPECT_EQ(bm.n_used(), 6);
  bm.free(1);
  bm.free(2);
  EXPECT_EQ(bm.n_evictable(), 0);
  EXPECT_EQ(bm.n_free(), 8);
  EXPECT_EQ(bm.prefix_hits(), 0u);
  expect_consistent(bm);
}

TEST(BlockManager, FreedCachedPrefixIsReusedAndCountedAsHit) {
  BlockManager bm(8, 4);
  const std::vector<int32_t> prompt = iota_tokens(9);
  ASSERT_EQ(bm.allocate_with_prefix(1, prompt), 0);
  bm.commit_full_blocks(1, prompt);
  const std::vector<int32_t> t1 = bm.table(1);
  bm.free(1);
  EXPECT_EQ(bm.n_evictable(), 2);
  EXPECT_EQ(bm.n_used(), 0);
  EXPECT_DOUBLE_EQ(bm.usage(), 0.0);  // evictable blocks are not "in use"
  expect_consistent(bm);

  EXPECT_EQ(bm.blocks_needed(prompt), 3);  // two revived + one fresh
  ASSERT_EQ(bm.allocate_with_prefix(2, prompt), 8);
  EXPECT_EQ(bm.table(2)[0], t1[0]);
  EXPECT_EQ(bm.table(2)[1], t1[1]);
  EXPECT_EQ(bm.n_evictable(), 0);
  EXPECT_EQ(bm.prefix_queries(), 18u);
  EXPECT_EQ(bm.prefix_hits(), 8u);
  expect_consistent(bm);
}

TEST(BlockManager, EvictsOnlyWhenNoFreeBlockIsLeftAndLeastRecentFirst) {
  BlockManager bm(6, 2);
  const std::vector<int32_t> a = {1, 2, 3, 4, 5};   // full blocks [1 2] [3 4]
  const std::vector<int32_t> b = {9, 8, 7, 6, 5};   // full blocks [9 8] [7 6]
  ASSERT_TRUE(bm.allocate_with_prefix(1, a));
  bm.commit_full_blocks(1, a);
  ASSERT_TRUE(bm.allocate_with_prefix(2, b));
  bm.commit_full_blocks(2, b);
  const std::vector<int32_t> ta = bm.table(1), tb = bm.table(2);
  bm.free(1);  // released first: a's blocks are the least recent
  bm.free(2);
  EXPECT_EQ(bm.n_free(), 2);  // the two partial tails
  EXPECT_EQ(bm.n_evictable(), 4);

  // Two plain free blocks are used before any cached one is touched.
  ASSERT_TRUE(bm.append(3, 4));
  EXPECT_EQ(bm.match_prefix(a), 4);
  EXPECT_EQ(bm.match_prefix(b), 4);
  // The next block evicts a's tail block (a released tail first), then a's head.
  ASSERT_TRUE(bm.append(3, 1));
  EXPECT_EQ(bm.table(3).back(), ta[1]);
  EXPECT_FALSE(bm.is_cached(ta[1]));
  EXPECT_EQ(bm.match_prefix(a), 2);
  ASSERT_TRUE(bm.append(3, 2));
  EXPECT_EQ(bm.table(3).back(), ta[0]);
  EXPECT_EQ(bm.match_prefix(a), 0);
  EXPECT_EQ(bm.match_prefix(b), 4);  // the more recent prefix survives
  EXPECT_TRUE(bm.is_cached(tb[0]));
  expect_consistent(bm);
}

TEST(BlockManager, PrefixDifferingInBlockKSharesOnlyEarlierBlocks) {
  const int bs = 4;
  for (int k = 0; k < 4; ++k) {
    BlockManager bm(32, bs);
    const std::vector<int32_t> base = iota_tokens(5 * bs);
    ASSERT_TRUE(bm.allocate_with_prefix(1, base));
    bm.commit_full_blocks(1, base);
    for (int off = 0; off < bs; ++off) {  // a change at every offset of block k
      std::vector<int32_t> changed = base;
      changed[size_t(k * bs + off)] += 1000;
      EXPECT_EQ(bm.match_prefix(changed), k * bs) << "k=" << k << " off=" << off;
    }
    std::vector<int32_t> changed = base;
    changed[size_t(k * bs + 1)] = -1;
    ASSERT_EQ(bm.allocate_with_prefix(2, changed), k * bs);
    for (int i = 0; i < 5; ++i) {
      const bool shared = bm.table(2)[size_t(i)] == bm.table(1)[size_t(i)];
      EXPECT_EQ(shared, i < k) << "k=" << k << " block " << i;
    }
    // Later blocks equal in content but under a different parent are not matched either.
    bm.commit_full_blocks(2, changed);
    EXPECT_EQ(bm.match_prefix(base), 4 * bs);
    EXPECT_EQ(bm.match_prefix(changed), 4 * bs);
    expect_consistent(bm);
  }
}

TEST(BlockManager, DuplicateCommitKeepsTheFirstBlockCached) {
  BlockManager bm(8, 4);
  const std::vector<int32_t> p = iota_tokens(6);
  ASSERT_TRUE(bm.allocate_with_prefix(1, p));
  ASSERT_TRUE(bm.allocate_with_prefix(2, p));  // both miss: nothing committed yet
  bm.commit_full_blocks(1, p);
  bm.commit_full_blocks(2, p);
  EXPECT_TRUE(bm.is_cached(bm.table(1)[0]));
  EXPECT_FALSE(bm.is_cached(bm.table(2)[0]));
  const int32_t private_block = bm.table(2)[0];
  bm.free(2);
  EXPECT_EQ(bm.n_evictable(), 0);  // seq 2's copy went back to the free list
  bm.free(1);
  EXPECT_EQ(bm.n_evictable(), 1);
  EXPECT_EQ(bm.ref_count(private_block), 0);
  expect_consistent(bm);
}

TEST(BlockManager, CommitAfterDecodeExtendsTheChain) {
  BlockManager bm(8, 4);
  std::vector<int32_t> tokens = iota_tokens(3);
  ASSERT_TRUE(bm.allocate_with_prefix(1, tokens));
  bm.commit_full_blocks(1, tokens);
  EXPECT_EQ(bm.match_prefix(iota_tokens(9)), 0);
  for (int32_t t = 103; t < 109; ++t) {  // decode six tokens
    ASSERT_TRUE(bm.append(1, 1));
    tokens.push_back(t);
    bm.commit_full_blocks(1, tokens);
  }
  EXPECT_EQ(bm.match_prefix(iota_tokens(9)), 8);
  EXPECT_THROW(bm.commit_full_blocks(1, iota_tokens(10)), std::invalid_argument);
  expect_consistent(bm);
}

TEST(BlockManager, UsageAndWatermarkAdmission) {
  BlockManager bm(10, 4);
  EXPECT_DOUBLE_EQ(bm.usage(), 0.0);
  EXPECT_TRUE(bm.can_admit(40, 0.0));
  EXPECT_FALSE(bm.can_admit(41, 0.0));
  EXPECT_TRUE(bm.can_admit(32, 0.2));   // 8 blocks + 2 kept back
  EXPECT_FALSE(bm.can_admit(33, 0.2));  // 9 blocks
  ASSERT_TRUE(bm.append(1, 13));        // 4 blocks
  EXPECT_DOUBLE_EQ(bm.usage(), 0.4);
  EXPECT_TRUE(bm.can_admit(16, 0.2));
  EXPECT_FALSE(bm.can_admit(17, 0.2));
  bm.free(1);
  EXPECT_DOUBLE_EQ(bm.usage(), 0.0);
}

// Many sequences with prompts drawn from a few shared stems, random appends, commits and
// frees; after every operation the block states and ref counts must agree with the tables.
TEST(BlockManager, RandomizedStressKeepsInvariants) {
  const int bs = 4, n_blocks = 48;
  BlockManager bm(n_blocks, bs);
  std::mt19937 rng(12345);
  std::vector<std::vector<int32_t>> stems;
  for (int s = 0; s < 4; ++s) {
    std::vector<int32_t> stem(24);
    for (auto& t : stem) t = int32_t(rng() % 5);
    stems.push_back(stem);
  }
  std::map<BlockManager::SeqId, std::vector<int32_t>> live;  // seq -> tokens whose KV exists
  BlockManager::SeqId next = 0;
  uint64_t hits = 0, queries = 0;
  int refused = 0, shared_seen = 0;
  for (int op = 0; op < 20000; ++op) {
    const unsigned what = rng() % 10;
    if (what < 3 || live.empty()) {
      const auto& stem = stems[rng() % stems.size()];
      std::vector<int32_t> prompt(stem.begin(), stem.begin() + 1 + rng() % stem.size());
      for (unsigned i = rng() % 6; i > 0; --i) prompt.push_back(int32_t(rng() % 5));
      const int64_t expect_hit = bm.match_prefix(prompt);
      const bool fits = bm.blocks_needed(prompt) <= bm.n_available();
      const auto hit = bm.allocate_with_prefix(next, prompt);
      ASSERT_EQ(hit.has_value(), fits);
      if (hit) {
        ASSERT_EQ(*hit, expect_hit);
        ASSERT_LT(*hit, int64_t(prompt.size()));
        hits += uint64_t(*hit);
        queries += prompt.size();
        bm.commit_full_blocks(next, prompt);
        live[next] = prompt;
      } else {
        ++refused;
        ASSERT_FALSE(bm.has(next));
      }
      ++next;
    } else if (what < 8) {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      const int64_t n = 1 + rng() % 6;
      const bool fits = bm.can_append(it->first, n);
      const int64_t before = bm.num_tokens(it->first);
      ASSERT_EQ(bm.append(it->first, n), fits);
      ASSERT_EQ(bm.num_tokens(it->first), before + (fits ? n : 0));
      if (fits) {
        for (int64_t i = 0; i < n; ++i) it->second.push_back(int32_t(rng() % 5));
        bm.commit_full_blocks(it->first, it->second);
      } else {
        ++refused;
      }
    } else {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      bm.free(it->first);
      live.erase(it);
    }
    ASSERT_EQ(bm.validate(), "") << "after op " << op;
    ASSERT_EQ(bm.n_seqs(), live.size());
    std::map<int32_t, int> refs;
    for (const auto& [id, toks] : live) {
      ASSERT_EQ(bm.num_tokens(id), int64_t(toks.size()));
      for (int32_t b : bm.table(id)) ++refs[b];
    }
    int used = 0;
    for (int32_t b = 0; b < n_blocks; ++b) {
      ASSERT_EQ(bm.ref_count(b), refs.count(b) ? refs[b] : 0) << "block " << b << " after op " << op;
      used += bm.ref_count(b) > 0;
      shared_seen += bm.ref_count(b) > 1;
    }
    ASSERT_EQ(bm.n_used(), used);
    ASSERT_EQ(bm.n_free() + bm.n_evictable() + used, n_blocks);
  }
  EXPECT_EQ(bm.prefix_hits(), hits);
  EXPECT_EQ(bm.prefix_queries(), queries);
  // The run must have exercised the interesting paths, not only the easy ones.
  EXPECT_GT(hits, 0u);
  EXPECT_GT(refused, 0);
  EXPECT_GT(shared_seen, 0);
  for (const auto& [id, toks] : live) bm.free(id);
  EXPECT_EQ(bm.n_used(), 0);
  EXPECT_EQ(bm.validate(), "");
}

}  // namespace
}  // namespace moe
