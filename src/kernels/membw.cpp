#include "kernels/membw.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/huge_pages.h"
#include "core/thread_pool.h"

namespace moe {
namespace {

// Four independent accumulators keep enough loads in flight that the loop is limited by
// memory, not by the add latency.
__attribute__((target("avx2"))) uint64_t sum_avx2(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  uint64_t lanes[4];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

uint64_t sum_generic(const uint8_t* p, size_t n) {
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (size_t i = 0; i + 32 <= n; i += 32) {
    uint64_t v[4];
    std::memcpy(v, p + i, 32);
    a0 += v[0];
    a1 += v[1];
    a2 += v[2];
    a3 += v[3];
  }
  return a0 + a1 + a2 + a3;
}

}  // namespace

ReadBandwidthProbe::ReadBandwidthProbe(ThreadPool& pool, size_t bytes)
    : pool_(pool),
      slice_(std::max<size_t>(bytes, 4096 * size_t(pool.size())) / size_t(pool.size()) / 4096 * 4096),
      owned_(allocate_huge_pages(slice_ * size_t(pool.size()), "the memory bandwidth test")),
      data_(owned_.get()) {
  // Touch every page from the thread that will read it, so pages are resident (and local).
  pool_.run([&](int i, int) { std::memset(owned_.get() + size_t(i) * slice_, 1, slice_); });
}

ReadBandwidthProbe::ReadBandwidthProbe(ThreadPool& pool, const uint8_t* data, size_t bytes)
    : pool_(pool), slice_(bytes / size_t(pool.size()) / 4096 * 4096), data_(data) {
  if (slice_ == 0) fail("memory bandwidth test: {} bytes is less than a page per thread", bytes);
}

double ReadBandwidthProbe::measure(int passes) {
  const int n = pool_.size();
  const bool avx2 = cpu_features().avx2;
  std::vector<uint64_t> sink(static_cast<size_t>(n), 0);
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    pool_.run([&](int i, int) {
      const uint8_t* p = data_ + size_t(i) * slice_;
      sink[size_t(i)] = avx2 ? sum_avx2(p, slice_) : sum_generic(p, slice_);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, double(slice_) * n / s / 1e9);
  }
  volatile uint64_t keep = 0;
  for (uint64_t v : sink) keep = keep + v;
  return best;
}

double measure_read_bandwidth_gbps(ThreadPool& pool, size_t bytes) { return ReadBandwidthProbe(pool, bytes).measure(4); }

}  // namespace moe
