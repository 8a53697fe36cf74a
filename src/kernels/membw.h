#pragma once
// The machine's memory-read bandwidth, the roofline a decode step (a GEMV over every
// active weight) is measured against.
#include <cstddef>
#include <cstdint>
#include <memory>

namespace moe {

class ThreadPool;

// A buffer of `bytes` (allocated and touched once, so use well over the last-level cache,
// e.g. 1 GiB) that every thread of the pool reads its own slice of with wide loads. On a
// shared machine the bandwidth on offer drifts by 10-20% from minute to minute, so a
// benchmark measures it right beside the run it compares against.
class ReadBandwidthProbe {
 public:
  ReadBandwidthProbe(ThreadPool& pool, size_t bytes);
  // The best of `passes` reads of the whole buffer, in GB/s (1e9 bytes per second).
  double measure(int passes = 2);

 private:
  ThreadPool& pool_;
  size_t slice_;  // bytes per thread
  std::unique_ptr<uint8_t, void (*)(void*)> buf_;
};

// One probe's best of four passes.
double measure_read_bandwidth_gbps(ThreadPool& pool, size_t bytes);

}  // namespace moe
