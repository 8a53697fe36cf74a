#include "engine/sampling.h"

#include <cmath>
#include <vector>

namespace moe {

int32_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return int32_t(best);
}

int32_t Sampler::sample(const float* logits, int64_t n_vocab) {
  if (temperature_ <= 0.0f) return argmax(logits, n_vocab);
  const float max = logits[argmax(logits, n_vocab)];
  std::vector<double> p(static_cast<size_t>(n_vocab));
  double sum = 0.0;
  for (int64_t i = 0; i < n_vocab; ++i) {
    p[size_t(i)] = std::exp(double(logits[i] - max) / temperature_);
    sum += p[size_t(i)];
  }
  const double r = std::uniform_real_distribution<double>(0.0, sum)(rng_);
  double acc = 0.0;
  for (int64_t i = 0; i < n_vocab; ++i) {
    acc += p[size_t(i)];
    if (r < acc) return int32_t(i);
  }
  return int32_t(n_vocab - 1);
}

}  // namespace moe
