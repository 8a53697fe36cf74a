#pragma once
// The machine's memory-read bandwidth, the roofline a decode step (a GEMV over every
// active weight) is measured against.
#include <cstddef>
#include <cstdint>
#include <memory>

namespace moe {

class ThreadPool;

// Memory (use well over the last-level cache, e.g. 1 GiB) that every thread of the pool
// reads its own slice of with wide loads. On a shared machine the bandwidth on offer drifts
// by 10-20% from minute to minute, so a benchmark measures it right beside the run it
// compares against.
//
// In a virtual machine the bandwidth also depends on where the memory lies: on the Zen 5
// VM, 128 MiB pieces of one huge-page allocation read at steady rates from 35 to 63 GB/s
// (each piece alike in interleaved rounds), by how the host backs them.
// So a decode step is best compared with a read of the very memory its weights lie in.
class ReadBandwidthProbe {
 public:
  // A buffer of `bytes` of its own, in transparent huge pages as the weights are once
  // loaded (on 4 KiB pages two Zen 5 cores read 5-12% less, which would flatter a decode
  // step measured against it), touched once by the thread that reads each slice.
  ReadBandwidthProbe(ThreadPool& pool, size_t bytes);
  // `bytes` at `data`, memory the caller owns and keeps while the probe is used (a
  // model's weights); `data` aligned to 32 bytes.
  ReadBandwidthProbe(ThreadPool& pool, const uint8_t* data, size_t bytes);
  // The best of `passes` reads of the whole memory, in GB/s (1e9 bytes per second).
  double measure(int passes = 2);

 private:
  ThreadPool& pool_;
  size_t slice_;  // bytes per thread
  std::shared_ptr<uint8_t> owned_;
  const uint8_t* data_;
};

// One probe's best of four passes.
double measure_read_bandwidth_gbps(ThreadPool& pool, size_t bytes);

}  // namespace moe
