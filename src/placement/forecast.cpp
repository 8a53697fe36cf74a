#include "placement/forecast.h"

#include <cmath>
#include <limits>
#include <vector>

namespace moe::placement {
namespace {

// Recency weights for steps [begin, end), scaled to sum to the step count; tau 0 is flat.
std::vector<double> weights(int64_t begin, int64_t end, double tau) {
  std::vector<double> w(size_t(end - begin), 1.0);
  if (tau <= 0) return w;
  double sum = 0;
  for (int64_t t = begin; t < end; ++t) sum += w[size_t(t - begin)] = std::exp(-double(end - 1 - t) / tau);
  for (double& v : w) v *= double(end - begin) / sum;
  return w;
}

// One layer's weighted loads over [begin, end), added to out (f64 [experts]).
void accumulate(const Trace& trace, int64_t l, int64_t begin, int64_t end, double tau, double* out) {
  const std::vector<double> w = weights(begin, end, tau);
  for (int64_t t = begin; t < end; ++t) {
    const float* row = trace.row(t, l);
    for (int64_t e = 0; e < trace.experts; ++e) out[e] += w[size_t(t - begin)] * row[e];
  }
}

}  // namespace

LoadMatrix forecast_load(const Trace& trace, Window window) {
  const int64_t E = trace.experts, n = window.size();
  LoadMatrix out{trace.layers, E, std::vector<double>(size_t(trace.layers * E), 0.0)};
  const int64_t split = window.end - n / 4;
  std::vector<double> actual(static_cast<size_t>(E)), guess(static_cast<size_t>(E));
  for (int64_t l = 0; l < trace.layers; ++l) {
    double tau = 0;
    if (n >= 4) {
      std::fill(actual.begin(), actual.end(), 0.0);
      accumulate(trace, l, split, window.end, 0, actual.data());
      double best = std::numeric_limits<double>::infinity();
      for (double candidate : kForecastTaus) {
        std::fill(guess.begin(), guess.end(), 0.0);
        accumulate(trace, l, window.begin, split, candidate, guess.data());
        double err = 0;
        for (int64_t e = 0; e < E; ++e) {
          const double d = guess[size_t(e)] / double(split - window.begin) - actual[size_t(e)] / double(window.end - split);
          err += d * d;
        }
        if (err < best) best = err, tau = candidate;
      }
    }
    accumulate(trace, l, window.begin, window.end, tau, out.load.data() + l * E);
  }
  return out;
}

}  // namespace moe::placement
