#pragma once
// The generator's random streams: counter-based and seeded per tensor row, so a file does
// not depend on the thread count or on the order rows are made in.
#include <cstdint>
#include <string>

namespace moe::gen {

inline uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1), from the top 24 bits so it is exact in a float.
inline float uniform_pm1(uint64_t& s) { return float(splitmix(s) >> 40) * (1.0f / 8388608.0f) - 1.0f; }

inline uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace moe::gen
