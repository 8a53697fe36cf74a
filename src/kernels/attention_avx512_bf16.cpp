// Attention over a bf16 KV cache with AVX512_BF16 dot products: the keys and values are
// read as they are stored, never converted, and each VDPBF16PS does the work of two FMAs.
// Kv heads shared by 16 or more query heads (MLA's latent row, wide GQA groups) take the
// lanes kernels, with rows in the lanes; narrower groups put 16 keys in the lanes.
//
// Lanes scores: queries rounded to bf16 once per segment and laid out as the f32 lanes kernel
// lays them (rows in the lanes), in pairs of dims: qt[(p * kLaneRows + i)] holds row i's
// dims 2p and 2p + 1. Each key pair (2 bf16, one 32-bit broadcast) meets 16 rows at once.
// Values: pairs of positions, their rows interleaved dim by dim, against the pair of
// softmax weights (rounded to bf16) of each row. Sums stay in f32.
//
// Rounding the queries and the weights to bf16 is what bf16 dot products cost: about 2^-9
// of each, as llama.cpp's f16 path rounds its queries to f16. A row's arithmetic depends
// only on its own query, whatever the rows beside it.
#include <algorithm>
#include <cstring>

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include "core/fp16.h"
#include "kernels/attention_impl.h"
#include "kernels/attention_avx512_common.h"

// The AVX-512 set of the other kernels (attention_avx512_common.h inlines into these) plus BF16.
#define MOE_BF16_TARGET "avx512f,avx512bw,avx512vl,avx512vnni,avx512bf16,avx2,fma,f16c"
#define MOE_BF16 __attribute__((target(MOE_BF16_TARGET)))
#define MOE_BF16_INLINE __attribute__((target(MOE_BF16_TARGET), always_inline)) inline

namespace moe::attn {
namespace {

MOE_BF16_INLINE __mmask16 tail16(int64_t n) { return __mmask16((1u << n) - 1); }

// acc + q . (the bf16 pair at p, broadcast): the broadcast folded into the instruction's
// memory operand ({1to16}).
MOE_BF16_INLINE __m512 dp_bcast(__m512 acc, __m512i q, const uint16_t* p) {
  asm("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(q), "m"(*reinterpret_cast<const uint32_t*>(p)));
  return acc;
}

void transpose_queries_bf16(int rows, const float* const* q, int64_t dk, uint32_t* qt) {
  const int64_t pairs = dk / 2;
  for (int g0 = 0; g0 < rows; g0 += kLaneRows) {
    uint32_t* dst = qt + int64_t(g0) * pairs;
    for (int i = 0; i < kLaneRows; ++i) {
      for (int64_t p = 0; p < pairs; ++p) {
        dst[p * kLaneRows + i] =
            g0 + i < rows ? uint32_t(f32_to_bf16(q[g0 + i][2 * p])) | uint32_t(f32_to_bf16(q[g0 + i][2 * p + 1])) << 16 : 0u;
      }
    }
  }
}

// One group's rows (in the lanes) against 16 keys; the first nj scores of each row stored.
MOE_BF16_INLINE void lanes_tile(int rg, int nj, const uint32_t* qg, const uint16_t* const* k, int64_t dk, float scale,
                                float* s) {
  __m512 acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t p = 0; p < dk / 2; ++p) {
    const __m512i qv = _mm512_loadu_si512(qg + p * kLaneRows);
    for (int j = 0; j < 16; ++j) acc[j] = dp_bcast(acc[j], qv, k[j] + 2 * p);
  }
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_mul_ps(acc[j], _mm512_set1_ps(scale));
  transpose16(acc);
  for (int r = 0; r < rg; ++r) _mm512_mask_storeu_ps(s + r * kChunk, tail16(nj), acc[r]);
}

MOE_BF16 void scores_lanes_bf16(int rows, int np, const uint32_t* qt, const uint16_t* const* k, int64_t dk, float scale,
                                float* s) {
  // A chunk's last keys are padded with repeats of its last one (computed, not stored).
  const uint16_t* kp[kChunk + 16];
  for (int j = 0; j < np + 16; ++j) kp[j] = k[std::min(j, np - 1)];
  for (int g0 = 0; g0 < rows; g0 += kLaneRows) {
    const int rg = std::min(kLaneRows, rows - g0);
    for (int j = 0; j < np; j += 16) {
      lanes_tile(rg, std::min(16, np - j), qt + int64_t(g0) * (dk / 2), kp + j, dk, scale, s + g0 * kChunk + j);
    }
  }
}

void convert_queries_bf16(int rows, const float* const* q, int64_t dk, uint16_t* out) {
  for (int r = 0; r < rows; ++r)
    for (int64_t d = 0; d < dk; ++d) out[r * dk + d] = f32_to_bf16(q[r][d]);
}

// Narrow groups (fewer rows than the lanes kernels need) put the keys in the lanes instead:
// 16 keys' rows are transposed into pairs of dims, kt[p * 16 + j] = key j's dims 2p, 2p + 1,
// and each query pair (one 32-bit broadcast) meets 16 keys in one VDPBF16PS, so no score
// needs a horizontal sum. The transpose is paid once per 16 keys for all rows. Dims go in
// slabs of kSlabPairs pairs, the scores accumulated in s from slab to slab.
constexpr int64_t kSlabPairs = 64;

// The 16 keys' dim pairs p0 .. p0 + n_pairs - 1, transposed into kt.
MOE_BF16_INLINE void transpose_keys(const uint16_t* const* k, int64_t p0, int64_t n_pairs, uint32_t* kt) {
  for (int64_t p = 0; p < n_pairs; p += 16) {
    const __mmask16 m = tail16(std::min<int64_t>(16, n_pairs - p));
    __m512 v[16];
    for (int j = 0; j < 16; ++j) v[j] = _mm512_castsi512_ps(_mm512_maskz_loadu_epi32(m, k[j] + 2 * (p0 + p)));
    transpose16(v);
    for (int i = 0; i < 16 && p + i < n_pairs; ++i) _mm512_store_ps(kt + (p + i) * 16, v[i]);
  }
}

// R rows against the slab's 16 transposed keys, added to (first: stored in) s; scale: the
// last slab's factor (1 before it).
template <int R>
MOE_BF16_INLINE void keys_tile(const uint16_t* const* q, int64_t p0, int64_t n_pairs, const uint32_t* kt, bool first,
                               float scale, int nj, float* s) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(tail16(nj), s + r * kChunk);
  for (int64_t p = 0; p < n_pairs; ++p) {
    const __m512i kv = _mm512_load_si512(kt + p * 16);
    for (int r = 0; r < R; ++r) acc[r] = dp_bcast(acc[r], kv, q[r] + 2 * (p0 + p));
  }
  for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(s + r * kChunk, tail16(nj), _mm512_mul_ps(acc[r], _mm512_set1_ps(scale)));
}

MOE_BF16 void scores_bf16(int rows, int np, const uint16_t* const* q, const uint16_t* const* k, int64_t dk, float scale,
                          float* s) {
  alignas(64) uint32_t kt[kSlabPairs * 16];
  const int64_t pairs = dk / 2;
  for (int j0 = 0; j0 < np; j0 += 16) {
    const int nj = std::min(16, np - j0);
    const uint16_t* kj[16];
    for (int j = 0; j < 16; ++j) kj[j] = k[j0 + std::min(j, nj - 1)];
    for (int64_t p0 = 0; p0 < pairs; p0 += kSlabPairs) {
      const int64_t n_pairs = std::min(kSlabPairs, pairs - p0);
      const bool first = p0 == 0;
      const float f = p0 + n_pairs == pairs ? scale : 1.0f;
      transpose_keys(kj, p0, n_pairs, kt);
      int r = 0;
      for (; r + 8 <= rows; r += 8) keys_tile<8>(q + r, p0, n_pairs, kt, first, f, nj, s + r * kChunk + j0);
      switch (rows - r) {
        case 0: break;
        case 1: keys_tile<1>(q + r, p0, n_pairs, kt, first, f, nj, s + r * kChunk + j0); break;
        case 2: keys_tile<2>(q + r, p0, n_pairs, kt, first, f, nj, s + r * kChunk + j0); break;
        case 3: keys_tile<3>(q + r, p0, n_pairs, kt, first, f, nj, s + r * kChunk + j0); break;
        case 4: keys_tile<4>(q + r, p0, n_pairs, kt, first, f, nj, s + r * kChunk + j0); break;
        case 5: keys_tile<5>(q + r, p0, n_pairs, kt, first, f, nj, s + r * kChunk + j0); break;
        case 6: keys_tile<6>(q + r, p0, n_pairs, kt, first, f, nj, s + r * kChunk + j0); break;
        default: keys_tile<7>(q + r, p0, n_pairs, kt, first, f, nj, s + r * kChunk + j0); break;
      }
    }
  }
}

// 16 dims of two positions' values, interleaved: lane i holds (a[i], b[i]).
MOE_BF16_INLINE __m512i interleave(const uint16_t* a, const uint16_t* b, __mmask16 mask) {
  const __m512i idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35,
                                       3, 34, 2, 33, 1, 32, 0);
  const __m512i va = _mm512_castsi256_si512(_mm256_maskz_loadu_epi16(mask, a));
  const __m512i vb = _mm512_castsi256_si512(_mm256_maskz_loadu_epi16(mask, b));
  return _mm512_permutex2var_epi16(va, idx, vb);
}

// R rows, W vectors of 16 value dims at offset d, over the chunk's position pairs. sp holds
// each row's weights as bf16 pairs: sp[r * kChunk / 2 + j / 2] = (s[r][j], s[r][j + 1]).
template <int R, int W>
MOE_BF16_INLINE void acc_tile(int np, const uint32_t* sp, const float* alpha, const uint16_t* const* v, int64_t dv, int64_t d,
                              __mmask16 mask, float* acc) {
  __m512 a[R][W];
  for (int r = 0; r < R; ++r) {
    const __m512 al = _mm512_set1_ps(alpha[r]);
    for (int w = 0; w < W; ++w) a[r][w] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, acc + r * dv + d + 16 * w), al);
  }
  for (int j = 0; j < np; j += 2) {
    const uint16_t* v1 = v[std::min(j + 1, np - 1)];  // an odd chunk's last pair: its weight is 0
    __m512i vv[W];
    for (int w = 0; w < W; ++w) vv[w] = interleave(v[j] + d + 16 * w, v1 + d + 16 * w, mask);
    for (int r = 0; r < R; ++r) {
      const __m512i sw = _mm512_set1_epi32(int(sp[r * (kChunk / 2) + j / 2]));
      for (int w = 0; w < W; ++w) a[r][w] = _mm512_dpbf16_ps(a[r][w], __m512bh(sw), __m512bh(vv[w]));
    }
  }
  for (int r = 0; r < R; ++r)
    for (int w = 0; w < W; ++w) _mm512_mask_storeu_ps(acc + r * dv + d + 16 * w, mask, a[r][w]);
}

template <int R>
MOE_BF16 void accumulate_rows(int np, const uint32_t* sp, const float* alpha, const uint16_t* const* v, int64_t dv, float* acc) {
  int64_t d = 0;
  for (; d + 64 <= dv; d += 64) acc_tile<R, 4>(np, sp, alpha, v, dv, d, 0xFFFF, acc);
  for (; d + 16 <= dv; d += 16) acc_tile<R, 1>(np, sp, alpha, v, dv, d, 0xFFFF, acc);
  if (d < dv) acc_tile<R, 1>(np, sp, alpha, v, dv, d, tail16(dv - d), acc);
}

MOE_BF16 void accumulate_bf16(int rows, int np, const float* s, const float* alpha, const uint16_t* const* v, int64_t dv,
                              float* acc) {
  // Each row's weights as bf16 pairs, a weight past np as 0.
  alignas(64) uint32_t sp[kMaxTileRows * kChunk / 2];
  static_assert(kChunk == 32);
  for (int r = 0; r < rows; ++r) {
    const __mmask16 lo = tail16(std::min(np, 16)), hi = tail16(std::max(0, np - 16));
    const __m512 a = _mm512_maskz_loadu_ps(lo, s + r * kChunk), b = _mm512_maskz_loadu_ps(hi, s + r * kChunk + 16);
    _mm512_store_si512(sp + r * (kChunk / 2), __m512i(_mm512_cvtne2ps_pbh(b, a)));
  }
  for (int r0 = 0; r0 < rows; r0 += 4) {
    const uint32_t* sb = sp + r0 * (kChunk / 2);
    float* ab = acc + r0 * dv;
    switch (std::min(4, rows - r0)) {
      case 1: accumulate_rows<1>(np, sb, alpha + r0, v, dv, ab); break;
      case 2: accumulate_rows<2>(np, sb, alpha + r0, v, dv, ab); break;
      case 3: accumulate_rows<3>(np, sb, alpha + r0, v, dv, ab); break;
      default: accumulate_rows<4>(np, sb, alpha + r0, v, dv, ab); break;
    }
  }
}

}  // namespace

Bf16Kernels avx512_bf16_kernels() {
  return Bf16Kernels{transpose_queries_bf16, scores_lanes_bf16, convert_queries_bf16, scores_bf16, accumulate_bf16};
}

}  // namespace moe::attn
