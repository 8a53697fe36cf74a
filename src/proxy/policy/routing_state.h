#pragma once
// What a policy carries from one decision to the next, passed in and out explicitly so
// that every policy stays a function of its arguments. The caller keeps one per stage
// (prefill, decode), the proxy under its lock, the simulator per run.
#include <cstdint>

namespace moe::routing {

struct RoutingState {
  uint64_t turn = 0;  // round_robin: decisions made so far
  uint64_t rng = 0;   // power_of_two: SplitMix64 state; the seed, at the start

  // SplitMix64 (Steele, Lea, Flood 2014): tiny, and the same sequence on every platform.
  uint64_t next_random() {
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

}  // namespace moe::routing
