#pragma once
// When each benchmark request is sent: gaps drawn from a gamma distribution with mean
// 1/rate. Burstiness 1 is a Poisson process (exponential gaps); below 1 the arrivals come
// in bursts, above 1 they are more even (the same knob `vllm bench serve --burstiness` has).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace moe::loadgen {

// Send offsets in seconds from the start, non-decreasing, the first one 0 (the benchmark's
// clock starts with the first request). rate = infinity sends everything at 0.
// Deterministic for a seed.
// Throws moe::Error when rate or burstiness is not positive.
std::vector<double> arrival_offsets(size_t n, double rate_per_s, double burstiness, uint64_t seed);

}  // namespace moe::loadgen
