#pragma once
// Internals shared by the matmul code paths: where things live inside a packed
// activation row, the per-path kernel tables, and the loop that walks a row range in
// register tiles. Not for use outside src/kernels.
#include <algorithm>
#include <cstdint>

#include "kernels/matmul.h"

namespace moe::mm {

// How a weight type wants its activations (see the layout comment on PackedActs).
enum class ActFormat { F32, Q8x32, Q8x256 };

inline ActFormat act_format(GgmlType w) {
  switch (w) {
    case GgmlType::Q8_0:
    case GgmlType::Q8_0_R16:
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q5_0_R16:
    case GgmlType::Q4_1:
    case GgmlType::Q5_1: return ActFormat::Q8x32;
    case GgmlType::Q4_K:
    case GgmlType::Q4_K_R16:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::Q6_K_R16: return ActFormat::Q8x256;
    default: return ActFormat::F32;
  }
}

inline int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Offsets inside one packed token. The int8 codes come first so block b's codes are at
// qs + 32 b (or 256 b), 32-byte aligned; scales and sums follow on the next cache line.
struct ActLayout {
  int64_t scales_at = 0;
  int64_t sums_at = 0;
  int64_t offsets_at = 0;  // Q8x32 only
  int64_t bytes = 0;
};

inline ActLayout act_layout(ActFormat f, int64_t cols) {
  ActLayout l;
  if (f == ActFormat::F32) {
    l.bytes = round_up(cols * 4, 64);
    return l;
  }
  const int64_t block = f == ActFormat::Q8x32 ? 32 : 256;
  const int64_t nb = cols / block;
  l.scales_at = round_up(cols, 64);
  l.sums_at = l.scales_at + nb * 4;
  if (f == ActFormat::Q8x32) {
    l.offsets_at = l.sums_at + nb * 4;
    l.bytes = round_up(l.offsets_at + nb * 4, 64);
  } else {
    l.bytes = round_up(l.sums_at + cols / 16 * 2, 64);
  }
  return l;
}

// One token of q8 activations for q8_0/q4_0/q5_0/q4_1/q5_1 weights: block b is
// qs[32b..32b+31] * d[b], and s[b] is the sum of its 32 codes (folds the -8/-16 offsets of
// q4_0/q5_0 into one add, and the mins of q4_1/q5_1 into one product m * d[b] * s[b]).
// o[b] = -128 s[b] starts the q8_0_r16 kernel's integer sums (its weights are stored +128):
// one broadcast load instead of a load, a multiply and a broadcast per block.
struct Q8x32View {
  const int8_t* qs;
  const float* d;
  const int32_t* s;
  const int32_t* o;
};

// One token of q8 activations for k-quants: super-block b is qs[256b..] * d[b], bsums[16b+g]
// the sum of codes 16g..16g+15 of it (folds the k-quant mins and q6_K's -32 offset).
struct Q8x256View {
  const int8_t* qs;
  const float* d;
  const int16_t* bsums;
};

inline Q8x32View q8x32_view(const PackedActs& x, int64_t t) {
  const uint8_t* p = x.token(t);
  const ActLayout l = act_layout(ActFormat::Q8x32, x.cols());
  return {reinterpret_cast<const int8_t*>(p), reinterpret_cast<const float*>(p + l.scales_at),
          reinterpret_cast<const int32_t*>(p + l.sums_at), reinterpret_cast<const int32_t*>(p + l.offsets_at)};
}

inline Q8x256View q8x256_view(const PackedActs& x, int64_t t) {
  const uint8_t* p = x.token(t);
  const ActLayout l = act_layout(ActFormat::Q8x256, x.cols());
  return {reinterpret_cast<const int8_t*>(p), reinterpret_cast<const float*>(p + l.scales_at),
          reinterpret_cast<const int16_t*>(p + l.sums_at)};
}

inline const float* f32_view(const PackedActs& x, int64_t t) {
  return reinterpret_cast<const float*>(x.token(t));
}

// Quantizes n floats (a multiple of `block`, 32 or 256) into codes, one scale per block,
// and per-block (block 32, with the offsets -128 s) or per-16 (block 256) code sums, in the
// layout above.
using PackQ8Fn = void (*)(const float* x, int64_t n, int block, uint8_t* token, const ActLayout& l);

using RowsFn = void (*)(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy,
                        int64_t row_begin, int64_t row_end);

// Kernel tables of each path; a null entry means "use the generic kernel".
RowsFn generic_rows(GgmlType t);
void generic_pack_q8(const float* x, int64_t n, int block, uint8_t* token, const ActLayout& l);
RowsFn avx2_rows(GgmlType t);
RowsFn avx2_rows_kquant(GgmlType t);
RowsFn avx2_rows_fp8();
void avx2_pack_q8(const float* x, int64_t n, int block, uint8_t* token, const ActLayout& l);
RowsFn avx512_rows(GgmlType t);
RowsFn avx512_rows_q8_0_r16();
RowsFn avx512_rows_q4_K_r16();
RowsFn avx512_rows_q6_K_r16();
RowsFn avx512_rows_q5_0_r16();
// The kernel of a regrouped type (kernels/regrouped.h).
inline RowsFn avx512_rows_regrouped(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0_R16: return avx512_rows_q8_0_r16();
    case GgmlType::Q4_K_R16: return avx512_rows_q4_K_r16();
    case GgmlType::Q6_K_R16: return avx512_rows_q6_K_r16();
    default: return avx512_rows_q5_0_r16();
  }
}
RowsFn avx512_rows_kquant(GgmlType t);
RowsFn avx512_rows_bf16();

// Calls the tile for exactly `n` (< kTokens) tokens, picking the instantiation at run time.
template <class K, int R, int T>
void tail_tokens(const QMatrix& w, int64_t r, const PackedActs& x, int64_t t, int64_t n, float* y,
                 int64_t ldy) {
  if constexpr (T >= 1) {
    if (n == T) return K::template tile<R, T>(w, r, x, t, y, ldy, -1);
    tail_tokens<K, R, T - 1>(w, r, x, t, n, y, ldy);
  }
}

// The decode row loop (see run_tiles): row(r, pf_row) for r in [r0, r1), where pf_row is
// the row to prefetch while computing r, or -1.
template <class RowFn>
void gemv_loop(const QMatrix& w, int64_t r0, int64_t r1, RowFn row) {
  const int64_t rb = int64_t(row_bytes(w.type, w.cols));
  const int64_t ahead = std::max<int64_t>(1, (8192 + rb - 1) / rb);
  for (int64_t r = r0; r < std::min(r1, r0 + ahead); ++r) {
    for (int64_t off = 0; off < rb; off += 64) __builtin_prefetch(w.row(r) + off);
  }
  for (int64_t r = r0; r < r1; ++r) row(r, r + ahead < r1 ? r + ahead : -1);
}

// Walks rows [r0, r1) x all tokens in tiles. K supplies the GEMM tile size and
// `template <int R, int T> static void tile(w, row, x, tok, y, ldy, pf_row)` computing R
// rows x T tokens.
//
// One token (decode): one row at a time, so the weights are read as one sequential stream
// (interleaving several rows measured 20-30% slower on a busy memory system: the hardware
// prefetchers train late on short interleaved streams). Each row prefetches the row about
// 2 KiB ahead at the pace it consumes its own (pf_row; -1 for none); nothing past r1 is
// prefetched, as those rows belong to another thread. The first rows of the range, which
// no earlier row prefetched, are requested up front so their misses overlap.
//
// More tokens: kRows x kTokens tiles, so each weight block loaded into registers serves
// several tokens, over token blocks small enough for their codes to stay in L2.
template <class K>
void run_tiles(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t nt = x.n_tokens();
  if (nt == 1) {
    gemv_loop(w, r0, r1, [&](int64_t r, int64_t pf_row) { K::template tile<1, 1>(w, r, x, 0, y, ldy, pf_row); });
    return;
  }
  constexpr int64_t kTokenBlock = 64;
  for (int64_t t0 = 0; t0 < nt; t0 += kTokenBlock) {
    const int64_t t1 = std::min(nt, t0 + kTokenBlock);
    int64_t r = r0;
    for (; r + K::kRows <= r1; r += K::kRows) {
      int64_t t = t0;
      for (; t + K::kTokens <= t1; t += K::kTokens) K::template tile<K::kRows, K::kTokens>(w, r, x, t, y, ldy, -1);
      if (t < t1) tail_tokens<K, K::kRows, K::kTokens - 1>(w, r, x, t, t1 - t, y, ldy);
    }
    for (; r < r1; ++r) {
      int64_t t = t0;
      for (; t + K::kTokens <= t1; t += K::kTokens) K::template tile<1, K::kTokens>(w, r, x, t, y, ldy, -1);
      if (t < t1) tail_tokens<K, 1, K::kTokens - 1>(w, r, x, t, t1 - t, y, ldy);
    }
  }
}

}  // namespace moe::mm
