// Optimized RMSNorm, SwiGLU, softmax and top-k. The arithmetic follows ggml's CPU ops
// (square in float, sum in double for RMSNorm; scale applied before the weight) so that
// results stay close to llama.cpp's. Two paths: portable scalar code, and AVX2/FMA chosen
// at run time.
#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "kernels/ops_simd.h"

namespace moe {
namespace {

// ---- portable path ----

void rms_norm_generic(const float* x, const float* w, float* y, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i] * x[i]);
  const float scale = 1.0f / std::sqrt(float(sum / double(n)) + eps);
  if (w) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * scale) * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
  }
}

void swiglu_generic(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void softmax_generic(float* x, int64_t n) {
  const float max = *std::max_element(x, x + n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = float(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

// ---- AVX2 + FMA ----

MOE_AVX2 void rms_norm_avx2(const float* x, const float* w, float* y, int64_t n, float eps) {
  // Four double accumulators hide the add latency; squares are rounded to float first,
  // as ggml does, and only their sum is kept in double.
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                    _mm256_setzero_pd()};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_loadu_ps(x + i);
    const __m256 b = _mm256_loadu_ps(x + i + 8);
    const __m256 sa = _mm256_mul_ps(a, a);
    const __m256 sb = _mm256_mul_ps(b, b);
    acc[0] = _mm256_add_pd(acc[0], _mm256_cvtps_pd(_mm256_castps256_ps128(sa)));
    acc[1] = _mm256_add_pd(acc[1], _mm256_cvtps_pd(_mm256_extractf128_ps(sa, 1)));
    acc[2] = _mm256_add_pd(acc[2], _mm256_cvtps_pd(_mm256_castps256_ps128(sb)));
    acc[3] = _mm256_add_pd(acc[3], _mm256_cvtps_pd(_mm256_extractf128_ps(sb, 1)));
  }
  const __m256d s = _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3]));
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, s);
  double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) sum += double(x[i] * x[i]);

  const float scale = 1.0f / std::sqrt(float(sum / double(n)) + eps);
  const __m256 vs = _mm256_set1_ps(scale);
  i = 0;
  if (w) {
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
      _mm256_storeu_ps(y + i, _mm256_mul_ps(v, _mm256_loadu_ps(w + i)));
    }
    for (; i < n; ++i) y[i] = (x[i] * scale) * w[i];
  } else {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    for (; i < n; ++i) y[i] = x[i] * scale;
  }
}

MOE_AVX2 inline __m256 silu_times(__m256 g, __m256 u) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = simd::exp(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u);
}

MOE_AVX2 void swiglu_avx2(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, silu_times(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  }
  if (i < n) {
    // Masked lanes read nothing and are not written, so the tail needs no scalar exp.
    const __m256i m = simd::tail_mask(int(n - i));
    const __m256 r = silu_times(_mm256_maskload_ps(gate + i, m), _mm256_maskload_ps(up + i, m));
    _mm256_maskstore_ps(out + i, m, r);
  }
}

MOE_AVX2 void softmax_avx2(float* x, int64_t n) {
  float max = x[0];
  int64_t i = 0;
  if (n >= 8) {
    __m256 vm = _mm256_loadu_ps(x);
    for (i = 8; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
    max = simd::hmax(vm);
  }
  for (; i < n; ++i) max = std::max(max, x[i]);

  const __m256 vmax = _mm256_set1_ps(max);
  __m256 vsum = _mm256_setzero_ps();
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 e = simd::exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
    _mm256_storeu_ps(x + i, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  if (i < n) {
    const __m256i m = simd::tail_mask(int(n - i));
    // Masked-off lanes load 0, so they must be zeroed again before summing.
    __m256 e = simd::exp(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), vmax));
    e = _mm256_and_ps(e, _mm256_castsi256_ps(m));
    _mm256_maskstore_ps(x + i, m, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  const __m256 inv = _mm256_set1_ps(1.0f / simd::hsum(vsum));
  for (i = 0; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
  if (i < n) {
    const __m256i m = simd::tail_mask(int(n - i));
    _mm256_maskstore_ps(x + i, m, _mm256_mul_ps(_mm256_maskload_ps(x + i, m), inv));
  }
}

struct OpsImpl {
  void (*rms_norm)(const float*, const float*, float*, int64_t, float);
  void (*swiglu)(const float*, const float*, float*, int64_t);
  void (*softmax)(float*, int64_t);
  const char* name;
};

const OpsImpl& impl() {
  static const OpsImpl chosen =
      cpu_features().has_avx2_fma()
          ? OpsImpl{rms_norm_avx2, swiglu_avx2, softmax_avx2, "avx2"}
          : OpsImpl{rms_norm_generic, swiglu_generic, softmax_generic, "generic"};
  return chosen;
}

// Largest k of n by insertion into a sorted buffer: routers pick 2-8 of 64-256 experts,
// where one pass with a handful of comparisons per value beats any sort.
constexpr int kInsertionTopK = 32;

void top_k_insertion(const float* x, int64_t n, int k, int32_t* out_idx) {
  float vals[kInsertionTopK];
  int count = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    // A value equal to the current k-th loses to it: the lower index stays first.
    if (count == k && !(v > vals[k - 1])) continue;
    int j = count < k ? count++ : k - 1;
    for (; j > 0 && vals[j - 1] < v; --j) {
      vals[j] = vals[j - 1];
      out_idx[j] = out_idx[j - 1];
    }
    vals[j] = v;
    out_idx[j] = int32_t(i);
  }
}

}  // namespace

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  if (n > 0) impl().rms_norm(x, w, y, n, eps);
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  if (n > 0) impl().swiglu(gate, up, out, n);
}

void softmax(float* x, int64_t n) {
  if (n > 0) impl().softmax(x, n);
}

void top_k(const float* x, int64_t n, int k, int32_t* out_idx) {
  if (k <= 0) return;
  if (k > n) fail("top_k: k = {} is larger than the {} values to choose from", k, n);
  if (k <= kInsertionTopK) {
    top_k_insertion(x, n, k, out_idx);
    return;
  }
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [x](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  std::copy(idx.begin(), idx.begin() + k, out_idx);
}

const char* ops_backend_name() { return impl().name; }

}  // namespace moe
