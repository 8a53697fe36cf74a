#pragma once
// The machine's memory-read bandwidth, the roofline a decode step (a GEMV over every
// active weight) is measured against.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace moe {

class ThreadPool;

struct ByteRange {
  const uint8_t* data;
  size_t bytes;
};

// Memory (use well over the last-level cache, e.g. 1 GiB) read with wide loads, each
// thread of the pool its own contiguous share. On a shared machine the bandwidth on offer
// drifts by 10-20% from minute to minute, so a benchmark measures it right beside the run
// it compares against.
//
// In a virtual machine the bandwidth also depends on where the memory lies: on the Zen 5
// VM, 128 MiB pieces of one huge-page allocation read at steady rates from 35 to 63 GB/s
// (each piece alike in interleaved rounds), by how the host backs them. So a decode step
// is best compared with a read of the very bytes it reads.
class ReadBandwidthProbe {
 public:
  // A buffer of `bytes` of its own, in transparent huge pages as the weights are once
  // loaded (on 4 KiB pages two Zen 5 cores read 5-12% less, which would flatter a decode
  // step measured against it), touched once by the thread that reads each slice.
  ReadBandwidthProbe(ThreadPool& pool, size_t bytes);
  // The ranges one after another (a decode step's weight matrices in the order it reads
  // them), memory the caller keeps while the probe is used.
  ReadBandwidthProbe(ThreadPool& pool, const std::vector<ByteRange>& ranges);
  // The best of `passes` reads of all the memory, in GB/s (1e9 bytes per second).
  double measure(int passes = 2);

 private:
  // Cuts the ranges' concatenation into one contiguous share per thread.
  void share_out(const std::vector<ByteRange>& ranges);

  ThreadPool& pool_;
  std::shared_ptr<uint8_t> owned_;
  std::vector<std::vector<ByteRange>> shares_;  // per thread
  size_t bytes_ = 0;                            // read by a pass
};

// One probe's best of four passes.
double measure_read_bandwidth_gbps(ThreadPool& pool, size_t bytes);

}  // namespace moe
