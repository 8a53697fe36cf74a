// Rotary position embedding with YaRN, reproducing ggml_rope_ext's float arithmetic step
// by step (same operation order, float throughout, the angle advanced by repeated
// multiplication with theta_scale) so tables agree with llama.cpp's to the last bit where
// the C library's cosf/sinf agree.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/cpu_features.h"
#include "core/error.h"
#include "kernels/ops.h"
#include "kernels/ops_simd.h"

namespace moe {
namespace {

// The dimension at which a pair turns `n_turns` times over n_ctx_orig positions
// (ggml_rope_yarn_corr_dim), solved from n_ctx_orig = 2 pi n_turns base^(2 d / n_rot).
float yarn_corr_dim(int n_rot, int n_ctx_orig, float n_turns, float base) {
  return float(n_rot) * std::log(float(n_ctx_orig) / (n_turns * 2.0f * std::numbers::pi_v<float>)) /
         (2.0f * std::log(base));
}

// 1 below the ramp (pure extrapolation), 0 above it (pure interpolation).
float yarn_ramp(float low, float high, int pair) {
  const float y = (float(pair) - low) / std::max(0.001f, high - low);
  return 1.0f - std::min(1.0f, std::max(0.0f, y));
}

void check(const RopeParams& p) {
  if (p.n_rot <= 0 || p.n_rot % 2 != 0)
    fail("rope: n_rot must be positive and even, got {}", p.n_rot);
}

// What stays the same for every position of one table.
struct RopeConsts {
  float theta_scale;
  float corr[2];
  float mscale;  // attn_factor, times YaRN's magnitude correction when the ramp is on
};

RopeConsts rope_consts(const RopeParams& p) {
  RopeConsts c;
  c.theta_scale = std::pow(p.freq_base, -2.0f / float(p.n_rot));
  rope_yarn_corr_dims(p, c.corr);
  c.mscale = p.attn_factor;
  if (p.ext_factor != 0.0f) c.mscale *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
  return c;
}

void fill_position(const RopeParams& p, const RopeConsts& c, int32_t position, float* out) {
  float theta_extrap_base = float(position);
  for (int i = 0; i < p.n_rot / 2; ++i) {
    const float ff = p.freq_factors ? p.freq_factors[i] : 1.0f;
    const float theta_extrap = theta_extrap_base / ff;
    const float theta_interp = p.freq_scale * theta_extrap;
    float theta = theta_interp;
    if (p.ext_factor != 0.0f) {
      const float mix = yarn_ramp(c.corr[0], c.corr[1], i) * p.ext_factor;
      theta = theta_interp * (1.0f - mix) + theta_extrap * mix;
    }
    out[2 * i] = std::cos(theta) * c.mscale;
    out[2 * i + 1] = std::sin(theta) * c.mscale;
    theta_extrap_base *= c.theta_scale;
  }
}

void apply_rope_generic(float* x, int64_t n_heads, int64_t head_stride, const float* cs, int n_rot,
                        RopeStyle style) {
  const int half = n_rot / 2;
  const int64_t step = style == RopeStyle::Neox ? half : 1;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_stride;
    for (int i = 0; i < half; ++i) {
      // Neox pairs (i, i + half); interleaved pairs (2i, 2i + 1).
      float* a = style == RopeStyle::Neox ? v + i : v + 2 * i;
      float* b = a + step;
      const float x0 = *a, x1 = *b, c = cs[2 * i], s = cs[2 * i + 1];
      *a = x0 * c - x1 * s;
      *b = x0 * s + x1 * c;
    }
  }
}

MOE_AVX2 void apply_rope_avx2(float* x, int64_t n_heads, int64_t head_stride, const float* cs,
                              int n_rot, RopeStyle style) {
  const int half = n_rot / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_stride;
    int i = 0;
    if (style == RopeStyle::Interleaved) {
      // The table's (cos, sin) pairs line up with the (x0, x1) pairs of the head, so one
      // load gives both; fmaddsub makes x0 c - x1 s in even lanes and x1 c + x0 s in odd.
      for (; i + 8 <= n_rot; i += 8) {
        const __m256 t = _mm256_loadu_ps(cs + i);
        const __m256 xv = _mm256_loadu_ps(v + i);
        const __m256 swapped = _mm256_permute_ps(xv, 0xB1);
        const __m256 r = _mm256_fmaddsub_ps(xv, _mm256_moveldup_ps(t),
                                            _mm256_mul_ps(swapped, _mm256_movehdup_ps(t)));
        _mm256_storeu_ps(v + i, r);
      }
      for (int p = i / 2; p < half; ++p) {
        const float x0 = v[2 * p], x1 = v[2 * p + 1], c = cs[2 * p], s = cs[2 * p + 1];
        v[2 * p] = x0 * c - x1 * s;
        v[2 * p + 1] = x0 * s + x1 * c;
      }
    } else {
      for (; i + 8 <= half; i += 8) {
        const __m256 t0 = _mm256_loadu_ps(cs + 2 * i);
        const __m256 t1 = _mm256_loadu_ps(cs + 2 * i + 8);
        // De-interleave 8 (cos, sin) pairs: the in-lane shuffle leaves 64-bit chunks in
        // the order 0 2 1 3, which the cross-lane permute puts back.
        const __m256 c = _mm256_castpd_ps(_mm256_permute4x64_pd(
            _mm256_castps_pd(_mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(2, 0, 2, 0))), 0xD8));
        const __m256 s = _mm256_castpd_ps(_mm256_permute4x64_pd(
            _mm256_castps_pd(_mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 1, 3, 1))), 0xD8));
        const __m256 x0 = _mm256_loadu_ps(v + i);
        const __m256 x1 = _mm256_loadu_ps(v + i + half);
        _mm256_storeu_ps(v + i, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));
        _mm256_storeu_ps(v + i + half, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
      }
      for (; i < half; ++i) {
        const float x0 = v[i], x1 = v[i + half], c = cs[2 * i], s = cs[2 * i + 1];
        v[i] = x0 * c - x1 * s;
        v[i + half] = x0 * s + x1 * c;
      }
    }
  }
}

using ApplyRopeFn = void (*)(float*, int64_t, int64_t, const float*, int, RopeStyle);

ApplyRopeFn apply_rope_impl() {
  static const ApplyRopeFn fn =
      cpu_features().has_avx2_fma() ? apply_rope_avx2 : apply_rope_generic;
  return fn;
}

}  // namespace

void rope_yarn_corr_dims(const RopeParams& p, float dims[2]) {
  const float start = std::floor(yarn_corr_dim(p.n_rot, p.n_ctx_orig, p.beta_fast, p.freq_base));
  const float end = std::ceil(yarn_corr_dim(p.n_rot, p.n_ctx_orig, p.beta_slow, p.freq_base));
  dims[0] = std::max(0.0f, start);
  dims[1] = std::min(float(p.n_rot - 1), end);
}

void RopeTable::build(const RopeParams& p, const int32_t* positions, int64_t n_positions) {
  check(p);
  pairs_ = p.n_rot / 2;
  table_.resize(size_t(n_positions) * size_t(pairs_) * 2);
  const RopeConsts c = rope_consts(p);
  for (int64_t t = 0; t < n_positions; ++t)
    fill_position(p, c, positions[t], table_.data() + t * pairs_ * 2);
}

void rope_table_ref(const RopeParams& p, int32_t position, float* cos_sin_out) {
  check(p);
  fill_position(p, rope_consts(p), position, cos_sin_out);
}

void apply_rope(float* x, int64_t n_heads, int64_t head_stride, const float* cos_sin, int n_rot,
                RopeStyle style) {
  apply_rope_impl()(x, n_heads, head_stride, cos_sin, n_rot, style);
}

void apply_rope_ref(float* x, int64_t n_heads, int64_t head_stride, const float* cos_sin, int n_rot,
                    RopeStyle style) {
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_stride;
    for (int i = 0; i < n_rot / 2; ++i) {
      const int64_t a = style == RopeStyle::Neox ? i : 2 * i;
      const int64_t b = style == RopeStyle::Neox ? i + n_rot / 2 : 2 * i + 1;
      const double x0 = v[a], x1 = v[b], c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
      v[a] = float(x0 * c - x1 * s);
      v[b] = float(x0 * s + x1 * c);
    }
  }
}

}  // namespace moe
