#include "placement/forecast.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace moe::placement {
namespace {

constexpr double kSpikeCap = 1.5, kSpikeSlack = 4.0;

// Recency weights for steps [begin, end), scaled to sum to the step count; tau 0 is flat.
std::vector<double> weights(int64_t begin, int64_t end, double tau) {
  std::vector<double> w(size_t(end - begin), 1.0);
  if (tau <= 0) return w;
  double sum = 0;
  for (int64_t t = begin; t < end; ++t) sum += w[size_t(t - begin)] = std::exp(-double(end - 1 - t) / tau);
  for (double& v : w) v *= double(end - begin) / sum;
  return w;
}

// One layer's loads over the window with one-step spikes clipped: a step's load of an
// expert is capped at kSpikeCap x the median of that step and its two neighbours, plus
// kSpikeSlack tokens so that Poisson noise on small loads is left alone (the nearest full
// triple at the window's edges). A burst lasts one step and would otherwise dominate a
// short memory; a change in rank persists, and the median follows it.
// f64 [steps, experts], rows from window.begin.
std::vector<double> despiked(const Trace& trace, int64_t l, Window window) {
  const int64_t E = trace.experts, n = window.size();
  std::vector<double> out(size_t(n * E));
  for (int64_t i = 0; i < n; ++i) {
    const float* row = trace.row(window.begin + i, l);
    double* dst = out.data() + i * E;
    for (int64_t e = 0; e < E; ++e) dst[e] = row[e];
    if (n < 3) continue;
    const int64_t c = window.begin + std::clamp<int64_t>(i, 1, n - 2);
    const float *a = trace.row(c - 1, l), *b = trace.row(c, l), *d = trace.row(c + 1, l);
    for (int64_t e = 0; e < E; ++e) {
      const double median = std::max(std::min(a[e], b[e]), std::min(std::max(a[e], b[e]), d[e]));
      dst[e] = std::min(dst[e], kSpikeCap * median + kSpikeSlack);
    }
  }
  return out;
}

// Weighted loads of rows [begin, end) of a layer's despiked window, added to out (f64 [experts]).
void accumulate(const std::vector<double>& rows, int64_t experts, int64_t begin, int64_t end, double tau, double* out) {
  const std::vector<double> w = weights(begin, end, tau);
  for (int64_t t = begin; t < end; ++t) {
    const double* row = rows.data() + t * experts;
    for (int64_t e = 0; e < experts; ++e) out[e] += w[size_t(t - begin)] * row[e];
  }
}

}  // namespace

LoadMatrix forecast_load(const Trace& trace, Window window) {
  const int64_t E = trace.experts, n = window.size();
  LoadMatrix out{trace.layers, E, std::vector<double>(size_t(trace.layers * E), 0.0)};
  const int64_t split = n - n / 4;
  std::vector<double> actual(static_cast<size_t>(E)), guess(static_cast<size_t>(E));
  for (int64_t l = 0; l < trace.layers; ++l) {
    const std::vector<double> rows = despiked(trace, l, window);
    double tau = 0;
    if (n >= 4) {
      std::fill(actual.begin(), actual.end(), 0.0);
      accumulate(rows, E, split, n, 0, actual.data());
      double best = std::numeric_limits<double>::infinity();
      for (double candidate : kForecastTaus) {
        std::fill(guess.begin(), guess.end(), 0.0);
        accumulate(rows, E, 0, split, candidate, guess.data());
        double err = 0;
        for (int64_t e = 0; e < E; ++e) {
          const double d = guess[size_t(e)] / double(split) - actual[size_t(e)] / double(n - split);
          err += d * d;
        }
        if (err < best) best = err, tau = candidate;
      }
    }
    accumulate(rows, E, 0, n, tau, out.load.data() + l * E);
  }
  return out;
}

LoadMatrix forecast_deviation(const Trace& trace, Window window, const LoadMatrix& forecast) {
  const int64_t E = trace.experts, n = window.size();
  LoadMatrix out{trace.layers, E, std::vector<double>(size_t(trace.layers * E), 0.0)};
  for (int64_t l = 0; l < trace.layers; ++l) {
    double* dev = out.load.data() + l * E;
    const double* level = forecast.row(l);
    for (int64_t t = window.begin; t < window.end; ++t) {
      const float* row = trace.row(t, l);
      for (int64_t e = 0; e < E; ++e) {
        const double d = row[e] - level[e] / double(n);
        dev[e] += d * d;
      }
    }
    for (int64_t e = 0; e < E; ++e) dev[e] = double(n) * std::sqrt(dev[e] / double(n));
  }
  return out;
}

}  // namespace moe::placement
