// The EPLB baseline against cases worked by hand from the published algorithm.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "placement/eplb.h"

namespace moe::placement {
namespace {

TEST(Eplb, BalancedPackingPutsEachItemInTheLightestPackWithRoom) {
  // Sorted: 9 (item 1), 7 (3), 5 (0), 4 (2), 2 (4), 1 (5). Packs of 3:
  // 9 -> p0; 7 -> p1; 5 -> p1 (7 < 9); 4 -> p0 (9 < 12); 2 -> p1 (12 < 13), now full; 1 -> p0.
  const Packing p = balanced_packing({5, 9, 4, 7, 2, 1}, 2);
  EXPECT_EQ(p.pack, (std::vector<int32_t>{1, 0, 0, 1, 1, 0}));
  EXPECT_EQ(p.rank, (std::vector<int32_t>{1, 0, 1, 0, 2, 2}));
}

TEST(Eplb, ReplicateGivesEachSlotToTheLargestLoadPerReplica) {
  // Loads 10, 4, 3: slot 3 -> e0 (10), slot 4 -> e0 (5 > 4), slot 5 -> e1 (4 > 3.33).
  const Replication r = replicate_experts({10, 4, 3}, 6);
  EXPECT_EQ(r.phy2log, (std::vector<int32_t>{0, 1, 2, 0, 0, 1}));
  EXPECT_EQ(r.count, (std::vector<int32_t>{3, 2, 1}));
}

TEST(Eplb, GlobalPolicyOnOneLayer) {
  // 4 experts, 2 devices x 3 slots, groups (3) do not divide nodes (2): global policy.
  // Replicate: e0 (12) gets slot 4, then e0 again (6 > 5) slot 5: three replicas of 4 each.
  // Physical: e0 e1 e2 e3 e0 e0 with shares 4 5 2 1 4 4; sorted 5(e1) 4(e0) 4(e0) 4(e0) 2(e2) 1(e3).
  // Pack (3 each): 5 -> d0; 4 -> d1; 4 -> d1 (4 < 5); 4 -> d0 (5 < 8); 2 -> d1 (8 < 9), now full; 1 -> d0.
  const double load[] = {12, 5, 2, 1};
  const LayerPlacement l = eplb_layer(load, 4, Topology{2, 1, 3}, 3);
  EXPECT_EQ(l.devices, (std::vector<int32_t>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(l.slots, (std::vector<int32_t>{1, 0, 3, 0, 0, 2}));
}

TEST(Eplb, HierarchicalPacksGroupsToNodesFirst) {
  // 4 experts in 2 groups {0,1} and {2,3}; 2 nodes x 1 device x 3 slots.
  // Group loads 8+1 = 9 and 4+4 = 8: one group per node (group 0 -> node 0, group 1 -> node 1).
  // Node 0 replicates within {8, 1} to 3 slots: e0 twice. Node 1 within {4, 4}: e2 twice (tie -> lower).
  const double load[] = {8, 1, 4, 4};
  const LayerPlacement l = eplb_layer(load, 4, Topology{2, 1, 3}, 2);
  std::vector<int32_t> node0(l.slots.begin(), l.slots.begin() + 3), node1(l.slots.begin() + 3, l.slots.end());
  std::sort(node0.begin(), node0.end());
  std::sort(node1.begin(), node1.end());
  EXPECT_EQ(node0, (std::vector<int32_t>{0, 0, 1}));
  EXPECT_EQ(node1, (std::vector<int32_t>{2, 2, 3}));
  EXPECT_EQ(l.devices, (std::vector<int32_t>{0, 0, 0, 1, 1, 1}));
}

TEST(Eplb, HierarchicalSwapsGroupsWhenTheHeavyOneComesSecond) {
  // Group 1 ({2,3}) is heavier, so it is packed first and lands on node 0.
  const double load[] = {1, 1, 6, 2};
  const LayerPlacement l = eplb_layer(load, 4, Topology{2, 1, 2}, 2);
  std::vector<int32_t> node0(l.slots.begin(), l.slots.begin() + 2);
  std::sort(node0.begin(), node0.end());
  EXPECT_EQ(node0, (std::vector<int32_t>{2, 3}));
}

TEST(Eplb, GroupsThatDoNotSplitExpertsAreAnError) {
  const double load[] = {1, 1, 1, 1, 1, 1};
  EXPECT_THROW(eplb_layer(load, 6, Topology{2, 2, 2}, 4), Error);
}

}  // namespace
}  // namespace moe::placement
