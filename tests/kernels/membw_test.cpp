#include "kernels/membw.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/thread_pool.h"

namespace moe {
namespace {

// Pages between two inaccessible ones: a read outside them ends the test with a fault.
class Guarded {
 public:
  explicit Guarded(size_t bytes) : page_(size_t(sysconf(_SC_PAGESIZE))), span_((bytes + page_ - 1) / page_ * page_) {
    base_ = static_cast<uint8_t*>(mmap(nullptr, span_ + 2 * page_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (base_ == MAP_FAILED) throw Error("mmap failed");
    if (mprotect(base_ + page_, span_, PROT_READ | PROT_WRITE) != 0) throw Error("mprotect failed");
    std::memset(data(), 7, span_);
  }
  ~Guarded() { munmap(base_, span_ + 2 * page_); }
  uint8_t* data() { return base_ + page_; }
  size_t bytes() const { return span_; }
  // Makes one page inside inaccessible: a read of it ends the test with a fault.
  void forbid_page(size_t index) { mprotect(data() + index * page_, page_, PROT_NONE); }

 private:
  size_t page_, span_;
  uint8_t* base_;
};

// Ranges like a step's weight matrices: of odd lengths, starting off alignment.
std::vector<ByteRange> odd_ranges(Guarded& a, Guarded& b, Guarded& c) {
  return {
      {a.data() + 3, a.bytes() - 3}, {b.data(), 100}, {b.data() + 4096, b.bytes() - 4096 - 17}, {c.data(), c.bytes()}};
}

TEST(ReadBandwidthProbe, ReadsOnlyTheRangesItIsGiven) {
  Guarded a(size_t(3) << 20), b((size_t(1) << 20) + 5 * 4096), c(size_t(2) << 20);
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    ReadBandwidthProbe probe(pool, odd_ranges(a, b, c));
    const double gbps = probe.measure(1);
    EXPECT_TRUE(std::isfinite(gbps)) << threads << " threads";
    EXPECT_GT(gbps, 0.0) << threads << " threads";
  }
}

// Reads the odd ranges with one page inside range `which` made inaccessible.
void read_with_a_forbidden_page(int threads, int which) {
  Guarded a(size_t(3) << 20), b((size_t(1) << 20) + 5 * 4096), c(size_t(2) << 20);
  Guarded* guarded[] = {&a, &b, &b, &c};
  guarded[which]->forbid_page(which == 2 ? 150 : 300);
  ThreadPool pool(threads);
  ReadBandwidthProbe probe(pool, odd_ranges(a, b, c));
  probe.measure(1);
}

// Each thread's share reaches into the middle of the ranges: a page made inaccessible
// there, in the first, last or a middle range, is read (and faults) whichever thread's
// share it is in.
TEST(ReadBandwidthProbeDeathTest, ReadsAllOfEveryRange) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (int threads : {1, 2, 3}) {
    for (int which : {0, 2, 3}) {
      EXPECT_DEATH(read_with_a_forbidden_page(threads, which), "") << threads << " threads, range " << which;
    }
  }
}

TEST(ReadBandwidthProbe, RefusesLessThanAPagePerThread) {
  ThreadPool pool(2);
  Guarded mem(4096);
  try {
    ReadBandwidthProbe probe(pool, {{mem.data(), 3000}, {mem.data(), 1000}});
    FAIL() << "a probe over 4000 bytes for two threads was made";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "memory bandwidth test: 4000 bytes is less than a page per thread");
  }
}

TEST(ReadBandwidthProbe, MeasuresItsOwnBuffer) {
  ThreadPool pool(2);
  ReadBandwidthProbe probe(pool, size_t(8) << 20);
  const double gbps = probe.measure(1);
  EXPECT_TRUE(std::isfinite(gbps));
  EXPECT_GT(gbps, 0.0);
}

}  // namespace
}  // namespace moe
