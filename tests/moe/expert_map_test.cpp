// Which rank computes which expert: the even default, placements read as maps (and the
// ones that do not fit refused with the reason), and the replica choice for a token.
#include "moe/expert_map.h"

#include <gtest/gtest.h>

#include "support/bytes_test_util.h"

namespace moe {
namespace {

using testing::error_of;

placement::Placement two_ranks_with_replicas() {
  placement::Placement p;
  p.nodes = 1;
  p.devices_per_node = 2;
  p.slots_per_device = 3;
  // Expert 0 on both ranks, expert 1 on both; 2 and 3 once each.
  p.layers.push_back({{0, 1, 2, 0, 1, 3}, {0, 0, 0, 1, 1, 1}});
  return p;
}

TEST(ExpertMap, EvenSpreadsContiguousRuns) {
  const ExpertMap m = ExpertMap::even(3, 8, 4);
  EXPECT_EQ(m.layers(), 3);
  for (int64_t l = 0; l < 3; ++l) {
    for (int32_t r = 0; r < 4; ++r) EXPECT_EQ(m.experts_on(l, r), (std::vector<int32_t>{2 * r, 2 * r + 1}));
  }
  EXPECT_EQ(m.rank_for(1, 5, 0, 17), 2);
  EXPECT_TRUE(m.holds(2, 3, 7));
  EXPECT_FALSE(m.holds(2, 3, 5));
}

TEST(ExpertMap, EvenNeedsAnExpertPerRank) {
  EXPECT_EQ(error_of([] { ExpertMap::even(2, 4, 8); }), "8 ranks cannot share 4 experts: every rank needs at least one");
}

TEST(ExpertMap, ATokenStaysHomeWhenItsRankHoldsAReplica) {
  const ExpertMap m = ExpertMap::from_placement(two_ranks_with_replicas(), 1, 4, 2, "p.json");
  for (int64_t t = 0; t < 100; ++t) {
    EXPECT_EQ(m.rank_for(0, 0, 0, t), 0);
    EXPECT_EQ(m.rank_for(0, 0, 1, t), 1);
    EXPECT_EQ(m.rank_for(0, 3, 0, t), 1);
    EXPECT_EQ(m.rank_for(0, 2, 1, t), 0);
  }
  EXPECT_EQ(m.holders(0, 1), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(m.experts_on(0, 1), (std::vector<int32_t>{0, 1, 3}));
}

TEST(ExpertMap, TokensOfARankWithoutAReplicaSpreadOverTheReplicas) {
  placement::Placement p;
  p.nodes = 1;
  p.devices_per_node = 3;
  p.slots_per_device = 2;
  // Expert 0 on ranks 1 and 2, not on rank 0.
  p.layers.push_back({{1, 2, 0, 3, 0, 1}, {0, 0, 1, 1, 2, 2}});
  const ExpertMap m = ExpertMap::from_placement(p, 1, 4, 3, "p.json");
  int on_1 = 0;
  for (int64_t t = 0; t < 1000; ++t) {
    const int32_t r = m.rank_for(0, 0, 0, t);
    ASSERT_TRUE(r == 1 || r == 2) << r;
    on_1 += r == 1;
    EXPECT_EQ(r, m.rank_for(0, 0, 0, t));  // a pure function
  }
  EXPECT_GT(on_1, 400);
  EXPECT_LT(on_1, 600);
}

TEST(ExpertMap, APlacementThatDoesNotFitIsRefusedWithTheReason) {
  const placement::Placement p = two_ranks_with_replicas();
  EXPECT_EQ(error_of([&] { ExpertMap::from_placement(p, 2, 4, 2, "p.json"); }),
            "p.json: the placement has 1 layers but the model has 2 MoE layers");
  EXPECT_EQ(error_of([&] { ExpertMap::from_placement(p, 1, 4, 4, "p.json"); }),
            "p.json: the placement is for 2 devices (1 nodes x 2) but the expert-parallel group has 4 ranks");
  const std::string missing = error_of([&] { ExpertMap::from_placement(p, 1, 5, 2, "p.json"); });
  EXPECT_EQ(missing.rfind("p.json", 0), 0u) << missing;
  EXPECT_NE(missing.find("4"), std::string::npos) << missing;
}

}  // namespace
}  // namespace moe
