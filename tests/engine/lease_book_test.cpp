// Leases on handed-off KV blocks: a release is decided at once, on any thread; the engine
// frees the blocks of ended leases later.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "engine/lease_book.h"

namespace moe {
namespace {

using Clock = LeaseBook::Clock;
using std::chrono::milliseconds;

TEST(LeaseBook, AReleaseInTimeIsReleasedAndItsBlocksAreFreedLater) {
  LeaseBook book;
  const Clock::time_point t0 = Clock::now();
  book.grant(1, t0 + milliseconds(100));
  book.grant(2, t0 + milliseconds(200));
  EXPECT_EQ(book.next_expiry(), t0 + milliseconds(100));
  LeaseRelease r = LeaseRelease::kUnknown;
  std::thread other([&] { r = book.release(1, t0 + milliseconds(50)); });
  other.join();
  EXPECT_EQ(r, LeaseRelease::kReleased);
  EXPECT_EQ(book.release(1, t0 + milliseconds(60)), LeaseRelease::kUnknown);  // twice
  EXPECT_EQ(book.n_held(), 2u);  // until the engine frees the blocks
  EXPECT_EQ(book.next_expiry(), t0 + milliseconds(200));
  EXPECT_EQ(book.take_ended(t0 + milliseconds(60)), std::vector<int64_t>{1});
  EXPECT_EQ(book.n_held(), 1u);
  EXPECT_EQ(book.n_released(), 1u);
}

TEST(LeaseBook, ALeaseRunsOutAndALateReleaseHearsSo) {
  LeaseBook book;
  const Clock::time_point t0 = Clock::now();
  book.grant(1, t0 + milliseconds(100));
  book.grant(2, t0 + milliseconds(100));
  // Past its time, not swept yet: expired all the same.
  EXPECT_EQ(book.release(1, t0 + milliseconds(100)), LeaseRelease::kExpired);
  std::vector<int64_t> ended = book.take_ended(t0 + milliseconds(150));
  std::sort(ended.begin(), ended.end());
  EXPECT_EQ(ended, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(book.release(2, t0 + milliseconds(160)), LeaseRelease::kExpired);
  EXPECT_EQ(book.release(3, t0), LeaseRelease::kUnknown);
  EXPECT_EQ(book.n_expired(), 2u);
  EXPECT_EQ(book.n_held(), 0u);
  EXPECT_FALSE(book.next_expiry().has_value());
}

}  // namespace
}  // namespace moe
