// Reference twins of the element-wise and row kernels: the definitions written out plainly,
// in double where accumulation order could matter, so that every optimized path can be
// checked against them.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "kernels/ops.h"

namespace moe {

void rms_norm_ref(const float* x, const float* w, float* y, int64_t n, float eps) {
  if (n <= 0) return;
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i]) * double(x[i]);
  const double inv = 1.0 / std::sqrt(sum / double(n) + double(eps));
  for (int64_t i = 0; i < n; ++i) {
    const double v = double(x[i]) * inv;
    y[i] = float(w ? v * double(w[i]) : v);
  }
}

void swiglu_ref(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = float(g / (1.0 + std::exp(-g)) * double(up[i]));
  }
}

void softmax_ref(float* x, int64_t n) {
  if (n <= 0) return;
  const double max = *std::max_element(x, x + n);
  std::vector<double> e(static_cast<size_t>(n));
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += e[size_t(i)] = std::exp(double(x[i]) - max);
  for (int64_t i = 0; i < n; ++i) x[i] = float(e[size_t(i)] / sum);
}

void top_k_ref(const float* x, int64_t n, int k, int32_t* out_idx) {
  if (k <= 0) return;
  if (k > n) fail("top_k: k = {} is larger than the {} values to choose from", k, n);
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  // A stable sort by value alone keeps equal values in index order.
  std::stable_sort(idx.begin(), idx.end(), [x](int32_t a, int32_t b) { return x[a] > x[b]; });
  std::copy(idx.begin(), idx.begin() + k, out_idx);
}

}  // namespace moe
