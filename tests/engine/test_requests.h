#pragma once
// Requests the engine tests send: reproducible prompts and greedy parameters.
#include <cstdint>
#include <vector>

#include "engine/request.h"

namespace moe::testing {

// n token ids in [0, 400) from a small linear congruential generator: the same for a seed.
inline std::vector<int32_t> prompt_of(int n, uint32_t seed) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) {
    seed = seed * 1103515245u + 12345u;
    t.push_back(int32_t((seed >> 8) % 400u));
  }
  return t;
}

// Greedy decoding of exactly max_tokens tokens (end-of-sequence ignored).
inline GenerateParams greedy(int64_t max_tokens) {
  GenerateParams p;
  p.sampling.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

}  // namespace moe::testing
