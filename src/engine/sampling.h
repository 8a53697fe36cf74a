#pragma once
// Choosing the next token from logits. Greedy at temperature 0; otherwise a draw from
// softmax(logits / T) with the request's own generator, so a seed reproduces the output.
#include <cstdint>
#include <random>

namespace moe {

class Sampler {
 public:
  Sampler(float temperature, uint64_t seed) : temperature_(temperature), rng_(seed) {}
  int32_t sample(const float* logits, int64_t n_vocab);

 private:
  float temperature_;
  std::mt19937_64 rng_;
};

int32_t argmax(const float* x, int64_t n);

}  // namespace moe
