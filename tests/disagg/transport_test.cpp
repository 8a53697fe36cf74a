// The transport-independent parts of KV transfer: coalescing reads, names.
#include <gtest/gtest.h>

#include "core/error.h"
#include "disagg/transport.h"

namespace moe::disagg {
namespace {

TEST(Coalesce, MergesReadsThatContinueOnBothSides) {
  const std::vector<ReadOp> out = coalesce({{0, 100, 10}, {10, 110, 5}, {15, 200, 5}, {40, 205, 5}, {45, 210, 0}, {45, 210, 3}});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].remote_offset, 0u);
  EXPECT_EQ(out[0].local_offset, 100u);
  EXPECT_EQ(out[0].bytes, 15u);
  EXPECT_EQ(out[1].remote_offset, 15u);
  EXPECT_EQ(out[1].local_offset, 200u);
  EXPECT_EQ(out[1].bytes, 5u);
  EXPECT_EQ(out[2].remote_offset, 40u);
  EXPECT_EQ(out[2].local_offset, 205u);
  EXPECT_EQ(out[2].bytes, 8u);
}

TEST(Coalesce, KeepsOrderAndDropsEmptyReads) {
  EXPECT_TRUE(coalesce({{5, 5, 0}}).empty());
  const std::vector<ReadOp> out = coalesce({{10, 0, 5}, {0, 5, 5}});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].remote_offset, 10u);
  EXPECT_EQ(out[1].remote_offset, 0u);
}

TEST(TransportKind, ParsesItsNamesAndRefusesOthers) {
  EXPECT_EQ(parse_transport_kind("ucx"), TransportKind::kUcx);
  EXPECT_EQ(parse_transport_kind("tcp"), TransportKind::kTcp);
  EXPECT_STREQ(transport_kind_name(TransportKind::kUcx), "ucx");
  try {
    (void)parse_transport_kind("rdma");
    FAIL() << "rdma accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'rdma'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moe::disagg
