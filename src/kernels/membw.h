#pragma once
// The machine's memory-read bandwidth, the roofline a decode step (a GEMV over every
// active weight) is measured against.
#include <cstddef>
#include <cstdint>
#include <memory>

namespace moe {

class ThreadPool;

// A buffer of `bytes` (allocated and touched once, so use well over the last-level cache,
// e.g. 1 GiB) that every thread of the pool reads its own slice of with wide loads. It lies
// in transparent huge pages, as the weights do once loaded: on 4 KiB pages two Zen 5 cores
// read 5-12% less, which would flatter a decode step measured against it. On a shared
// machine the bandwidth on offer drifts by 10-20% from minute to minute, so a benchmark
// measures it right beside the run it compares against.
class ReadBandwidthProbe {
 public:
  ReadBandwidthProbe(ThreadPool& pool, size_t bytes);
  // The best of `passes` reads of the whole buffer, in GB/s (1e9 bytes per second).
  double measure(int passes = 2);

 private:
  ThreadPool& pool_;
  size_t slice_;  // bytes per thread
  std::shared_ptr<uint8_t> buf_;
};

// One probe's best of four passes.
double measure_read_bandwidth_gbps(ThreadPool& pool, size_t bytes);

}  // namespace moe
