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

// Memory between two inaccessible pages: a read outside it ends the test with a fault.
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

 private:
  size_t page_, span_;
  uint8_t* base_;
};

TEST(ReadBandwidthProbe, ReadsOnlyTheCallersMemory) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (size_t bytes : {size_t(3) << 20, (size_t(5) << 20) + 3 * 4096}) {
      Guarded mem(bytes);
      ReadBandwidthProbe probe(pool, mem.data(), mem.bytes());
      const double gbps = probe.measure(1);
      EXPECT_TRUE(std::isfinite(gbps)) << threads << " threads, " << bytes << " bytes";
      EXPECT_GT(gbps, 0.0) << threads << " threads, " << bytes << " bytes";
    }
  }
}

TEST(ReadBandwidthProbe, RefusesLessThanAPagePerThread) {
  ThreadPool pool(2);
  Guarded mem(4096);
  try {
    ReadBandwidthProbe probe(pool, mem.data(), mem.bytes());
    FAIL() << "a probe over one page for two threads was made";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "memory bandwidth test: 4096 bytes is less than a page per thread");
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
