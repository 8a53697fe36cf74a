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
// memory, not by the add latency. Unaligned loads: a weight matrix may start anywhere (on
// aligned memory they cost the same).
__attribute__((target("avx2"))) uint64_t sum_avx2(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
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

ReadBandwidthProbe::ReadBandwidthProbe(ThreadPool& pool, size_t bytes) : pool_(pool) {
  const size_t slice = std::max<size_t>(bytes, 4096 * size_t(pool.size())) / size_t(pool.size()) / 4096 * 4096;
  owned_ = allocate_huge_pages(slice * size_t(pool.size()), "the memory bandwidth test");
  // Touch every page from the thread that will read it, so pages are resident (and local).
  pool_.run([&](int i, int) { std::memset(owned_.get() + size_t(i) * slice, 1, slice); });
  share_out({{owned_.get(), slice * size_t(pool.size())}});
}

ReadBandwidthProbe::ReadBandwidthProbe(ThreadPool& pool, const std::vector<ByteRange>& ranges) : pool_(pool) {
  share_out(ranges);
}

void ReadBandwidthProbe::share_out(const std::vector<ByteRange>& ranges) {
  const size_t n = size_t(pool_.size());
  size_t total = 0;
  for (const ByteRange& r : ranges) total += r.bytes;
  if (total < 4096 * n) fail("memory bandwidth test: {} bytes is less than a page per thread", total);
  shares_.assign(n, {});
  size_t at = 0;  // offset of the current range in the concatenation
  for (const ByteRange& r : ranges) {
    for (size_t i = 0; i < n; ++i) {
      const size_t lo = std::max(at, i * total / n), hi = std::min(at + r.bytes, (i + 1) * total / n);
      // The read loops take 128 bytes at a time; a piece's tail of fewer is left out.
      if (hi > lo && hi - lo >= 128) {
        shares_[i].push_back({r.data + (lo - at), (hi - lo) / 128 * 128});
        bytes_ += (hi - lo) / 128 * 128;
      }
    }
    at += r.bytes;
  }
}

double ReadBandwidthProbe::measure(int passes) {
  const int n = pool_.size();
  const bool avx2 = cpu_features().avx2;
  std::vector<uint64_t> sink(static_cast<size_t>(n), 0);
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    pool_.run([&](int i, int) {
      uint64_t sum = 0;
      for (const ByteRange& r : shares_[size_t(i)]) {
        sum += avx2 ? sum_avx2(r.data, r.bytes) : sum_generic(r.data, r.bytes);
      }
      sink[size_t(i)] = sum;
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, double(bytes_) / s / 1e9);
  }
  volatile uint64_t keep = 0;
  for (uint64_t v : sink) keep = keep + v;
  return best;
}

double measure_read_bandwidth_gbps(ThreadPool& pool, size_t bytes) { return ReadBandwidthProbe(pool, bytes).measure(4); }

}  // namespace moe
