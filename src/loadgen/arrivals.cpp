#include "loadgen/arrivals.h"

#include <cmath>
#include <random>

#include "core/error.h"

namespace moe::loadgen {

std::vector<double> arrival_offsets(size_t n, double rate_per_s, double burstiness, uint64_t seed) {
  if (!(rate_per_s > 0)) fail("the request rate must be positive or inf (got {})", rate_per_s);
  if (!(burstiness > 0) || !std::isfinite(burstiness)) fail("the burstiness must be positive (got {})", burstiness);
  std::vector<double> offsets(n, 0.0);
  if (std::isinf(rate_per_s)) return offsets;
  // Gamma(shape k, scale 1/(k*rate)) has mean 1/rate whatever k is.
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gap(burstiness, 1.0 / (burstiness * rate_per_s));
  for (size_t i = 1; i < n; ++i) offsets[i] = offsets[i - 1] + gap(rng);
  return offsets;
}

}  // namespace moe::loadgen
