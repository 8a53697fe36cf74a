#pragma once
// The machine's memory-read bandwidth, the roofline a decode step (a GEMV over every
// active weight) is measured against.
#include <cstddef>

namespace moe {

class ThreadPool;

// Reads a buffer of `bytes` (allocated and touched here, so use well over the last-level
// cache, e.g. 1 GiB) with every thread of the pool, each summing its own slice with wide
// loads; returns the best of a few passes in GB/s (1e9 bytes per second).
double measure_read_bandwidth_gbps(ThreadPool& pool, size_t bytes);

}  // namespace moe
