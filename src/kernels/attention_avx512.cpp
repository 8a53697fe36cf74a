// AVX-512 attention inner loops: the AVX2 ones (attention.cpp) with 16-float vectors and,
// with 32 registers, twice the accumulators per register block; and, for kv heads shared
// by 16 or more query heads (MLA), scores with the rows in the lanes. The softmax step is
// AVX2's. As there, a row's arithmetic does not depend on which rows share its block, so
// results are the same whatever the tile or the batch.
#include <algorithm>

// GCC 12's AVX-512 headers build "undefined" vectors from themselves (GCC bug 105593,
// fixed in 13), which -Wuninitialized reports at every use.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/attention_impl.h"
#include "kernels/attention_avx512_common.h"
#include "kernels/matmul_avx512.h"

namespace moe::attn {
namespace {

MOE_AVX512_INLINE __mmask16 tail16(int64_t n) { return __mmask16((1u << n) - 1); }

// RB query rows against NP key rows: RB * NP accumulators, each key load reused RB times
// and each query load NP times. A ragged dk ends with one masked step.
template <int RB, int NP>
MOE_AVX512_INLINE void dot_tile(const float* const* q, const float* const* k, int64_t dk, float scale, float* s) {
  __m512 acc[RB][NP];
  for (int r = 0; r < RB; ++r)
    for (int j = 0; j < NP; ++j) acc[r][j] = _mm512_setzero_ps();
  int64_t d = 0;
  for (; d + 16 <= dk; d += 16) {
    __m512 kv[NP];
    for (int j = 0; j < NP; ++j) kv[j] = _mm512_loadu_ps(k[j] + d);
    for (int r = 0; r < RB; ++r) {
      const __m512 qv = _mm512_loadu_ps(q[r] + d);
      for (int j = 0; j < NP; ++j) acc[r][j] = _mm512_fmadd_ps(qv, kv[j], acc[r][j]);
    }
  }
  if (d < dk) {
    const __mmask16 m = tail16(dk - d);
    __m512 kv[NP];
    for (int j = 0; j < NP; ++j) kv[j] = _mm512_maskz_loadu_ps(m, k[j] + d);
    for (int r = 0; r < RB; ++r) {
      const __m512 qv = _mm512_maskz_loadu_ps(m, q[r] + d);
      for (int j = 0; j < NP; ++j) acc[r][j] = _mm512_fmadd_ps(qv, kv[j], acc[r][j]);
    }
  }
  store_scores<RB, NP>(acc, scale, s);
}

template <int NP>
MOE_AVX512 void dot_rows(int rb, const float* const* q, const float* const* k, int64_t dk, float scale, float* s) {
  switch (rb) {
    case 1: return dot_tile<1, NP>(q, k, dk, scale, s);
    case 2: return dot_tile<2, NP>(q, k, dk, scale, s);
    case 3: return dot_tile<3, NP>(q, k, dk, scale, s);
    default: return dot_tile<4, NP>(q, k, dk, scale, s);
  }
}

MOE_AVX512 void scores(int rows, int np, const float* const* q, const float* const* k, int64_t dk, float scale,
                       float* s) {
  // Blocks of 2 to 4 rows against 4 keys: up to 16 accumulators plus the operands in the
  // 32 registers. A block's queries stay in L1 while the chunk's keys stream from L2.
  const int n_blocks = (rows + 3) / 4;
  for (int b = 0; b < n_blocks; ++b) {
    const int r0 = b * rows / n_blocks, rb = (b + 1) * rows / n_blocks - r0;
    float* sb = s + r0 * kChunk;
    int j = 0;
    for (; j + 4 <= np; j += 4) dot_rows<4>(rb, q + r0, k + j, dk, scale, sb + j);
    for (; j < np; ++j) dot_rows<1>(rb, q + r0, k + j, dk, scale, sb + j);
  }
}

// R rows, W vectors of 16 value dims per row at offset d: R * W accumulators stay in
// registers across the whole chunk; each value load is reused by R rows.
template <int R, int W>
MOE_AVX512_INLINE void acc_tile(int np, const float* s, const float* alpha, const float* const* v, int64_t dv,
                                int64_t d, __mmask16 mask, float* acc) {
  __m512 a[R][W];
  for (int r = 0; r < R; ++r) {
    const __m512 al = _mm512_set1_ps(alpha[r]);
    for (int w = 0; w < W; ++w) a[r][w] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, acc + r * dv + d + 16 * w), al);
  }
  for (int j = 0; j < np; ++j) {
    __m512 vv[W];
    for (int w = 0; w < W; ++w) vv[w] = _mm512_maskz_loadu_ps(mask, v[j] + d + 16 * w);
    for (int r = 0; r < R; ++r) {
      const __m512 sw = _mm512_set1_ps(s[r * kChunk + j]);
      for (int w = 0; w < W; ++w) a[r][w] = _mm512_fmadd_ps(sw, vv[w], a[r][w]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int w = 0; w < W; ++w) _mm512_mask_storeu_ps(acc + r * dv + d + 16 * w, mask, a[r][w]);
}

template <int R>
MOE_AVX512 void accumulate_rows(int np, const float* s, const float* alpha, const float* const* v, int64_t dv,
                                float* acc) {
  int64_t d = 0;
  for (; d + 64 <= dv; d += 64) acc_tile<R, 4>(np, s, alpha, v, dv, d, 0xFFFF, acc);
  for (; d + 16 <= dv; d += 16) acc_tile<R, 1>(np, s, alpha, v, dv, d, 0xFFFF, acc);
  if (d < dv) acc_tile<R, 1>(np, s, alpha, v, dv, d, tail16(dv - d), acc);
}

MOE_AVX512 void accumulate(int rows, int np, const float* s, const float* alpha, const float* const* v, int64_t dv,
                           float* acc) {
  // Blocks of 4 rows by 64 dims: 16 accumulators, 4 value loads and 4 broadcasts per 16 FMAs.
  for (int r0 = 0; r0 < rows; r0 += 4) {
    const float* sb = s + r0 * kChunk;
    float* ab = acc + r0 * dv;
    switch (std::min(4, rows - r0)) {
      case 1: accumulate_rows<1>(np, sb, alpha + r0, v, dv, ab); break;
      case 2: accumulate_rows<2>(np, sb, alpha + r0, v, dv, ab); break;
      case 3: accumulate_rows<3>(np, sb, alpha + r0, v, dv, ab); break;
      default: accumulate_rows<4>(np, sb, alpha + r0, v, dv, ab); break;
    }
  }
}

MOE_AVX512 void transpose_queries(int rows, const float* const* q, int64_t dk, float* qt) {
  for (int g0 = 0; g0 < rows; g0 += kLaneRows) {
    const int rg = std::min(kLaneRows, rows - g0);
    float* dst = qt + int64_t(g0) * dk;
    for (int64_t d0 = 0; d0 < dk; d0 += 16) {
      const int nd = int(std::min<int64_t>(16, dk - d0));
      __m512 v[16];
      for (int i = 0; i < 16; ++i) {
        v[i] = i < rg ? _mm512_maskz_loadu_ps(tail16(nd), q[g0 + i] + d0) : _mm512_setzero_ps();
      }
      transpose16(v);
      for (int c = 0; c < nd; ++c) _mm512_storeu_ps(dst + (d0 + c) * kLaneRows, v[c]);
    }
  }
}

// acc + a * (*p broadcast): the broadcast folded into the FMA's memory operand ({1to16}),
// which GCC 12 does not emit from the intrinsics.
MOE_AVX512_INLINE __m512 fmadd_bcast(__m512 acc, __m512 a, const float* p) {
  asm("vfmadd231ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(a), "m"(*p));
  return acc;
}

// One group's rows (in the lanes) against 16 keys: 16 accumulators, each key element loaded
// once as a broadcast, each transposed query load reused 16 times. The first nj scores of
// each row are stored.
MOE_AVX512_INLINE void lanes_tile(int rg, int nj, const float* qg, const float* const* k, int64_t dk, float scale,
                                  float* s) {
  __m512 acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t d = 0; d < dk; ++d) {
    const __m512 qv = _mm512_loadu_ps(qg + d * kLaneRows);
    for (int j = 0; j < 16; ++j) acc[j] = fmadd_bcast(acc[j], qv, k[j] + d);
  }
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_mul_ps(acc[j], _mm512_set1_ps(scale));
  transpose16(acc);  // acc[r]: row r's scores for the 16 keys
  for (int r = 0; r < rg; ++r) _mm512_mask_storeu_ps(s + r * kChunk, tail16(nj), acc[r]);
}

// Two groups' rows (32, in the lanes of two vectors) against 8 keys: each broadcast key
// element feeds both groups, so 10 loads serve 16 FMAs instead of 17. Each (row, key) sum
// is the same chain of FMAs as in lanes_tile.
MOE_AVX512_INLINE void lanes_tile2(int nj, const float* qg, const float* const* k, int64_t dk, float scale, float* s) {
  __m512 acc0[8], acc1[8];
  for (int j = 0; j < 8; ++j) acc0[j] = acc1[j] = _mm512_setzero_ps();
  const float* qg1 = qg + dk * kLaneRows;
  for (int64_t d = 0; d < dk; ++d) {
    const __m512 q0 = _mm512_loadu_ps(qg + d * kLaneRows), q1 = _mm512_loadu_ps(qg1 + d * kLaneRows);
    for (int j = 0; j < 8; ++j) {
      const __m512 kv = _mm512_set1_ps(k[j][d]);
      acc0[j] = _mm512_fmadd_ps(q0, kv, acc0[j]);
      acc1[j] = _mm512_fmadd_ps(q1, kv, acc1[j]);
    }
  }
  for (int g = 0; g < 2; ++g) {
    __m512 v[16];
    for (int j = 0; j < 16; ++j) {
      v[j] = j < 8 ? _mm512_mul_ps(g ? acc1[j] : acc0[j], _mm512_set1_ps(scale)) : _mm512_setzero_ps();
    }
    transpose16(v);  // v[r]: the group's row r's scores for the 8 keys, then zeros
    for (int r = 0; r < kLaneRows; ++r) _mm512_mask_storeu_ps(s + (g * kLaneRows + r) * kChunk, tail16(nj), v[r]);
  }
}

MOE_AVX512 void scores_lanes(int rows, int np, const float* qt, const float* const* k, int64_t dk, float scale,
                             float* s) {
  // Pairs of groups (a prefill tile's rows) share each key broadcast; a lone group (a
  // decode step's 16 heads) runs 16 keys at a time. A chunk's last keys are padded with
  // repeats of its last one (computed, not stored) rather than run in narrower tiles: 16
  // independent sums keep the FMA units busy, where one or four would each wait on a
  // chain of dk dependent FMAs.
  const float* kp[kChunk + 16];
  for (int j = 0; j < np + 16; ++j) kp[j] = k[std::min(j, np - 1)];
  int g0 = 0;
  for (; g0 + 2 * kLaneRows <= rows; g0 += 2 * kLaneRows) {
    for (int j = 0; j < np; j += 8) {
      lanes_tile2(std::min(8, np - j), qt + int64_t(g0) * dk, kp + j, dk, scale, s + g0 * kChunk + j);
    }
  }
  for (; g0 < rows; g0 += kLaneRows) {
    const int rg = std::min(kLaneRows, rows - g0);
    for (int j = 0; j < np; j += 16) {
      lanes_tile(rg, std::min(16, np - j), qt + int64_t(g0) * dk, kp + j, dk, scale, s + g0 * kChunk + j);
    }
  }
}

}  // namespace

AttnKernels avx512_kernels() {
  return AttnKernels{scores, softmax_avx2, accumulate, "avx512", transpose_queries, scores_lanes};
}

}  // namespace moe::attn
