// Block ids to byte ranges: the reads that copy a prompt's KV between two pools.
#include <gtest/gtest.h>

#include "core/error.h"
#include "disagg/kv_layout.h"

namespace moe::disagg {
namespace {

KvGeometry geometry(int64_t n_blocks) { return KvGeometry{3, n_blocks, 4, 10, "f32"}; }

TEST(KvLayout, OneReadPerLayerForRunsOfConsecutiveBlocksOnBothSides) {
  const KvGeometry p = geometry(8), d = geometry(16);
  const std::vector<ReadOp> ops = kv_block_reads(p, {5, 6, 7, 1}, d, {2, 3, 4, 9}, 0, 4);
  // Per layer: blocks 5-7 -> 2-4 in one read, 1 -> 9 in another.
  ASSERT_EQ(ops.size(), 6u);
  const uint64_t bb = 40;
  EXPECT_EQ(ops[0].remote_offset, 5 * bb);
  EXPECT_EQ(ops[0].local_offset, 2 * bb);
  EXPECT_EQ(ops[0].bytes, 3 * bb);
  EXPECT_EQ(ops[1].remote_offset, 1 * bb);
  EXPECT_EQ(ops[1].local_offset, 9 * bb);
  EXPECT_EQ(ops[2].remote_offset, (8 + 5) * bb);
  EXPECT_EQ(ops[2].local_offset, (16 + 2) * bb);
  EXPECT_EQ(ops[5].remote_offset, (16 + 1) * bb);
  EXPECT_EQ(ops[5].local_offset, (32 + 9) * bb);
}

TEST(KvLayout, BlocksBeforeFirstAreNotRead) {
  const std::vector<ReadOp> ops = kv_block_reads(geometry(8), {0, 1, 2}, geometry(8), {4, 5, 7}, 2, 3);
  ASSERT_EQ(ops.size(), 3u);
  for (const ReadOp& op : ops) EXPECT_EQ(op.bytes, 40u);
  EXPECT_EQ(ops[0].remote_offset, 2 * 40u);
  EXPECT_EQ(ops[0].local_offset, 7 * 40u);
  EXPECT_TRUE(kv_block_reads(geometry(8), {0}, geometry(8), {4}, 1, 1).empty());
}

TEST(KvLayout, RefusesOtherLayoutsShortTablesAndBlocksOutsideThePool) {
  KvGeometry other = geometry(8);
  other.block_size = 16;
  other.dtype = "bf16";
  EXPECT_EQ(kv_geometry_mismatch(other, geometry(8)), "block size 16 there, 4 here, dtype bf16 there, f32 here");
  EXPECT_THROW((void)kv_block_reads(other, {0}, geometry(8), {0}, 0, 1), Error);
  EXPECT_THROW((void)kv_block_reads(geometry(8), {0}, geometry(8), {0, 1}, 0, 2), Error);
  EXPECT_THROW((void)kv_block_reads(geometry(8), {8}, geometry(8), {0}, 0, 1), Error);
  EXPECT_THROW((void)kv_block_reads(geometry(8), {0}, geometry(8), {-1}, 0, 1), Error);
}

TEST(KvLayout, GeometryTravelsAsJson) {
  const KvGeometry g = kv_geometry_from_json(to_json(geometry(12)));
  EXPECT_EQ(g.n_blocks, 12);
  EXPECT_EQ(g.row_bytes, 10);
  EXPECT_TRUE(kv_geometry_mismatch(g, geometry(5)).empty());
  try {
    (void)kv_geometry_from_json(nlohmann::json{{"n_layers", 2}, {"n_blocks", "x"}});
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'n_blocks'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moe::disagg
