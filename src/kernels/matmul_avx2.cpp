// AVX2 + FMA + F16C kernels for float weights and the 32-element block types (q8_0, q4_0,
// q5_0, q4_1, q5_1), and the AVX2 activation packer. k-quants live in matmul_avx2_k.cpp.
#include <cstring>
#include <vector>

#include "kernels/matmul_avx2.h"
#include "kernels/matmul_impl.h"
#include "kernels/quant_blocks.h"

namespace moe::mm {
namespace {

using namespace avx2;

// ---- float weights: f32 activations, weights widened 8 at a time ----------------------
//
// Every kernel in this file sums a (row, token) product in the same order whatever the
// tile, decode included (one accumulator per pair, blocks in file order), so a token's
// result is bit-identical alone or in a batch: the engine's "batched == alone" invariant.

struct F32Load {
  static constexpr int kBytes = 4;
  MOE_AVX2_INLINE static __m256 load8(const uint8_t* row, int64_t i) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
  }
  MOE_AVX2_INLINE static float load1(const uint8_t* row, int64_t i) {
    return reinterpret_cast<const float*>(row)[i];
  }
};

struct F16Load {
  static constexpr int kBytes = 2;
  MOE_AVX2_INLINE static __m256 load8(const uint8_t* row, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
  }
  MOE_AVX2_INLINE static float load1(const uint8_t* row, int64_t i) {
    uint16_t h;
    std::memcpy(&h, row + 2 * i, 2);
    return half_to_float(h);
  }
};

struct BF16Load {
  static constexpr int kBytes = 2;
  MOE_AVX2_INLINE static __m256 load8(const uint8_t* row, int64_t i) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
  MOE_AVX2_INLINE static float load1(const uint8_t* row, int64_t i) {
    uint16_t h;
    std::memcpy(&h, row + 2 * i, 2);
    const uint32_t bits = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
};

template <class L>
struct FloatKernel {
  static constexpr int kRows = 4, kTokens = 3;

  template <int R, int T>
  MOE_AVX2 static void tile(const QMatrix& w, int64_t row, const PackedActs& x, int64_t tok, float* y,
                            int64_t ldy, int64_t pf_row) {
    const PrefetchRows<R> pf(w, row, pf_row);
    const uint8_t* wr[R];
    const float* a[T];
    for (int r = 0; r < R; ++r) wr[r] = w.row(row + r);
    for (int t = 0; t < T; ++t) a[t] = f32_view(x, tok + t);
    __m256 acc[R][T];
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
    }
    const int64_t n8 = w.cols / 8 * 8;
    for (int64_t i = 0; i < n8; i += 8) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        if constexpr (T == 1) {
          if (i * L::kBytes % 64 == 0) pf.template fetch<1>(r, i * L::kBytes);
        }
        const __m256 wv = L::load8(wr[r], i);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) acc[r][t] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(a[t] + i), acc[r][t]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) {
        float tail = 0;
        for (int64_t i = n8; i < w.cols; ++i) tail += L::load1(wr[r], i) * a[t][i];
        y[(tok + t) * ldy + row + r] = hsum(acc[r][t]) + tail;
      }
    }
  }
};

// ---- 32-element blocks against q8 activations ------------------------------------------
// Per block and (row, token): 32 code products summed exactly in int32, then scaled by the
// product of the two block scales. q8_0 codes are signed, so they go through the usual
// abs/sign trick to fit maddubs (unsigned x signed); q4_0/q5_0 codes are kept unsigned
// (0..15, 0..31) and their -8/-16 offset is folded in with the activation block's code sum.
// q4_1/q5_1 codes are the same unsigned codes; their min m adds m * d_a * sum(a codes) per
// block, one more FMA after the scaled code products (kMin).
//
// The main loops take four blocks at a time and fold their int32 partial sums into one
// vector (hadd), so the scale product, the int->float conversion and the FMA are paid once
// per four blocks instead of once per block; the four f16 weight scales are converted by
// one vcvtph2ps. Leftover blocks (fewer than four) go through the one-block step.

template <class Block>
MOE_AVX2_INLINE __m128 scales4(const Block* b) {
  const uint64_t h = uint64_t(b[0].d) | uint64_t(b[1].d) << 16 | uint64_t(b[2].d) << 32 | uint64_t(b[3].d) << 48;
  return _mm_cvtph_ps(_mm_cvtsi64_si128(int64_t(h)));
}

// The f16 mins of four q4_1 / q5_1 blocks.
template <class Block>
MOE_AVX2_INLINE __m128 mins4(const Block* b) {
  const uint64_t h = uint64_t(b[0].m) | uint64_t(b[1].m) << 16 | uint64_t(b[2].m) << 32 | uint64_t(b[3].m) << 48;
  return _mm_cvtph_ps(_mm_cvtsi64_si128(int64_t(h)));
}

struct Q8_0Codes {
  using Block = BlockQ8_0;
  static constexpr bool kSigned = true;
  static constexpr int kOffset = 0;
  static constexpr bool kMin = false;
  MOE_AVX2_INLINE static __m256i codes(const Block& b) { return load(b.qs); }
};

// Codes of two blocks side by side, as the pair kernels want them: lo holds elements 0..15
// of block b (low lane) and of block b+1 (high lane), hi elements 16..31 of both.
struct CodePair {
  __m256i lo, hi;
};

MOE_AVX2_INLINE CodePair nibble_pair(const uint8_t* qs0, const uint8_t* qs1) {
  const __m256i v = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(qs1), reinterpret_cast<const __m128i*>(qs0));
  const __m256i m = _mm256_set1_epi8(15);
  return {_mm256_and_si256(v, m), _mm256_and_si256(_mm256_srli_epi16(v, 4), m)};
}

// q4_0 (offset 8) and q4_1 (offset 0, min m): the same nibble codes.
template <class B, int kOff>
struct Q4Codes {
  using Block = B;
  static constexpr bool kSigned = false;
  static constexpr int kOffset = kOff;
  static constexpr bool kMin = kOff == 0;
  MOE_AVX2_INLINE static __m256i codes(const Block& b) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(15));
  }
  MOE_AVX2_INLINE static CodePair pair(const Block& b0, const Block& b1) { return nibble_pair(b0.qs, b1.qs); }
};

// 16 where the selected bit of the broadcast qh words is set: byte i of each 128-bit lane
// tests bit i % 8 of byte `first + i / 8` of that lane's qh.
MOE_AVX2_INLINE __m256i high_bits(__m256i qh, int first) {
  const int64_t lo = 0x0101010101010101LL * first, hi = 0x0101010101010101LL * (first + 1);
  const __m256i s = _mm256_shuffle_epi8(qh, _mm256_set_epi64x(hi, lo, hi, lo));
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
  return _mm256_andnot_si256(_mm256_cmpeq_epi8(_mm256_and_si256(s, bit), _mm256_setzero_si256()),
                             _mm256_set1_epi8(16));
}

// q5_0 (offset 16) and q5_1 (offset 0, min m): the same 5-bit codes.
template <class B, int kOff>
struct Q5Codes {
  using Block = B;
  static constexpr bool kSigned = false;
  static constexpr int kOffset = kOff;
  static constexpr bool kMin = kOff == 0;
  MOE_AVX2_INLINE static uint32_t qh(const Block& b) {
    uint32_t v;
    std::memcpy(&v, b.qh, 4);
    return v;
  }
  MOE_AVX2_INLINE static __m256i codes(const Block& b) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
    const __m256i lo4 = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(15));
    // Element i takes bit i of qh: bytes 0..15 from qh bytes 0..1, bytes 16..31 from 2..3.
    const __m256i h = _mm256_set1_epi32(int(qh(b)));
    const __m256i lo_half = high_bits(h, 0), hi_half = high_bits(h, 2);
    return _mm256_or_si256(lo4, _mm256_permute2x128_si256(lo_half, hi_half, 0x30));
  }
  MOE_AVX2_INLINE static CodePair pair(const Block& b0, const Block& b1) {
    CodePair c = nibble_pair(b0.qs, b1.qs);
    const __m256i h = _mm256_set_m128i(_mm_cvtsi32_si128(int(qh(b1))), _mm_cvtsi32_si128(int(qh(b0))));
    c.lo = _mm256_or_si256(c.lo, high_bits(h, 0));
    c.hi = _mm256_or_si256(c.hi, high_bits(h, 2));
    return c;
  }
};

// One block of R rows x T tokens (used for the blocks left over after the groups of four).
template <class C, int R, int T>
MOE_AVX2_INLINE void one_block(const typename C::Block* const (&wr)[R], const Q8x32View (&a)[T], int64_t b,
                               __m256 (&acc)[R][T]) {
  for (int r = 0; r < R; ++r) {
    const __m256i q = C::codes(wr[r][b]);
    const __m256i u = C::kSigned ? _mm256_sign_epi8(q, q) : q;
    const float dw = half_to_float(wr[r][b].d);
    for (int t = 0; t < T; ++t) {
      __m256i av = load(a[t].qs + 32 * b);
      if constexpr (C::kSigned) av = _mm256_sign_epi8(av, q);
      __m256i p = dot_u8s8(u, av);
      // Adding -s * offset / 8 to each of the 8 lanes subtracts offset * s in total.
      if constexpr (C::kOffset != 0) p = _mm256_add_epi32(p, _mm256_set1_epi32(-a[t].s[b] * (C::kOffset / 8)));
      acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * a[t].d[b]), acc[r][t]);
      if constexpr (C::kMin) {
        const float mw = half_to_float(wr[r][b].m);
        acc[r][t] = _mm256_fmadd_ps(_mm256_setr_ps(mw, 0, 0, 0, 0, 0, 0, 0),
                                    _mm256_set1_ps(a[t].d[b] * float(a[t].s[b])), acc[r][t]);
      }
    }
  }
}

struct Q8_0Kernel {
  static constexpr int kRows = 4, kTokens = 2;

  // One row, blocks b..b+3, every token.
  template <int T>
  MOE_AVX2_INLINE static void group(const BlockQ8_0* blk, const Q8x32View (&a)[T], int64_t b, __m256 (&acc)[T]) {
    const __m128 s4 = scales4(blk);
    const __m256 dw = _mm256_set_m128(s4, s4);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      __m256i m[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m256i q = load(blk[k].qs);
        m[k] = dot_u8s8(_mm256_sign_epi8(q, q), _mm256_sign_epi8(load(a[t].qs + 32 * (b + k)), q));
      }
      // Lanes [b0 b1 b2 b3 | b0 b1 b2 b3], each half of a block's sum.
      const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(m[0], m[1]), _mm256_hadd_epi32(m[2], m[3]));
      const __m256 da = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(a[t].d + b));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(h), _mm256_mul_ps(dw, da), acc[t]);
    }
  }

  template <int R, int T>
  MOE_AVX2 static void tile(const QMatrix& w, int64_t row, const PackedActs& x, int64_t tok, float* y,
                            int64_t ldy, int64_t pf_row) {
    const PrefetchRows<R> pf(w, row, pf_row);
    const BlockQ8_0* wr[R];
    Q8x32View a[T];
    for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const BlockQ8_0*>(w.row(row + r));
    for (int t = 0; t < T; ++t) a[t] = q8x32_view(x, tok + t);
    __m256 acc[R][T];
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
    }
    const int64_t nb = w.cols / 32, nb4 = nb / 4 * 4;
    int64_t b = 0;
    for (; b < nb4; b += 4) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        if constexpr (T == 1) pf.template fetch<3>(r, b * int64_t(sizeof(BlockQ8_0)));
        group<T>(wr[r] + b, a, b, acc[r]);
      }
    }
    for (; b < nb; ++b) one_block<Q8_0Codes, R, T>(wr, a, b, acc);
    store_tile(acc, y, ldy, row, tok);
  }
};

// q4_0 / q5_0 / q4_1 / q5_1: blocks in pairs (see CodePair), groups of two pairs. The
// activation side of a group (its codes regrouped to match, scales, offsets) is prepared
// once per token and shared by the rows of a tile.
struct PairActs {
  __m256i q[4];  // per pair: elements 0..15 of both blocks, then 16..31
  __m256 da;     // activation scales in the lane order of the folded sums
  union {
    __m256i off;  // q4_0 / q5_0: -offset/2 * code sum, same order
    __m256 ds;    // q4_1 / q5_1: d_a * code sum in the first lane of each block, else 0
  };
};

template <class C>
struct PairKernel {
  static constexpr int kRows = 4, kTokens = 2;

  // After hadd of the two pairs the lanes are [b0 b0 b2 b2 | b1 b1 b3 b3].
  MOE_AVX2_INLINE static __m256i order() { return _mm256_setr_epi32(0, 0, 2, 2, 1, 1, 3, 3); }

  MOE_AVX2_INLINE static PairActs prepare(const Q8x32View& a, int64_t b) {
    PairActs p;
    const int8_t* q = a.qs + 32 * b;
    const __m256i x0 = load(q), x1 = load(q + 32), x2 = load(q + 64), x3 = load(q + 96);
    p.q[0] = _mm256_permute2x128_si256(x0, x1, 0x20);
    p.q[1] = _mm256_permute2x128_si256(x0, x1, 0x31);
    p.q[2] = _mm256_permute2x128_si256(x2, x3, 0x20);
    p.q[3] = _mm256_permute2x128_si256(x2, x3, 0x31);
    p.da = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(a.d + b)), order());
    if constexpr (C::kMin) {
      // [ds0 ds1 ds2 ds3 0 0 0 0] to [ds0 0 ds2 0 | ds1 0 ds3 0].
      const __m128 ds4 = _mm_mul_ps(_mm_loadu_ps(a.d + b),
                                    _mm_cvtepi32_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.s + b))));
      p.ds = _mm256_permutevar8x32_ps(_mm256_insertf128_ps(_mm256_setzero_ps(), ds4, 0),
                                      _mm256_setr_epi32(0, 4, 2, 4, 1, 4, 3, 4));
    } else {
      const __m256i s = _mm256_permutevar8x32_epi32(
          _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.s + b))), order());
      constexpr int kShift = C::kOffset == 8 ? 2 : 3;  // each lane carries offset / 2 per code sum
      p.off = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(s, kShift));
    }
    return p;
  }

  // One row, blocks b..b+3, every token.
  template <int T>
  MOE_AVX2_INLINE static void group(const typename C::Block* blk, const PairActs (&pa)[T], __m256 (&acc)[T]) {
    const __m256 dw = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(scales4(blk)), order());
    __m256 mw = _mm256_setzero_ps();
    if constexpr (C::kMin) mw = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(mins4(blk)), order());
    const CodePair p01 = C::pair(blk[0], blk[1]), p23 = C::pair(blk[2], blk[3]);
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m256i m01 = _mm256_madd_epi16(
          _mm256_add_epi16(_mm256_maddubs_epi16(p01.lo, pa[t].q[0]), _mm256_maddubs_epi16(p01.hi, pa[t].q[1])), ones);
      const __m256i m23 = _mm256_madd_epi16(
          _mm256_add_epi16(_mm256_maddubs_epi16(p23.lo, pa[t].q[2]), _mm256_maddubs_epi16(p23.hi, pa[t].q[3])), ones);
      if constexpr (C::kMin) {
        const __m256i h = _mm256_hadd_epi32(m01, m23);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(h), _mm256_mul_ps(dw, pa[t].da), acc[t]);
        acc[t] = _mm256_fmadd_ps(mw, pa[t].ds, acc[t]);
      } else {
        const __m256i h = _mm256_add_epi32(_mm256_hadd_epi32(m01, m23), pa[t].off);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(h), _mm256_mul_ps(dw, pa[t].da), acc[t]);
      }
    }
  }

  template <int R, int T>
  MOE_AVX2 static void tile(const QMatrix& w, int64_t row, const PackedActs& x, int64_t tok, float* y,
                            int64_t ldy, int64_t pf_row) {
    using Block = typename C::Block;
    const PrefetchRows<R> pf(w, row, pf_row);
    const Block* wr[R];
    Q8x32View a[T];
    for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const Block*>(w.row(row + r));
    for (int t = 0; t < T; ++t) a[t] = q8x32_view(x, tok + t);
    __m256 acc[R][T];
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
    }
    const int64_t nb = w.cols / 32, nb4 = nb / 4 * 4;
    int64_t b = 0;
    for (; b < nb4; b += 4) {
      PairActs pa[T];
      for (int t = 0; t < T; ++t) pa[t] = prepare(a[t], b);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        if constexpr (T == 1) pf.template fetch<2>(r, b * int64_t(sizeof(Block)));
        group<T>(wr[r] + b, pa, acc[r]);
      }
    }
    for (; b < nb; ++b) one_block<C, R, T>(wr, a, b, acc);
    store_tile(acc, y, ldy, row, tok);
  }

  // Decode: the regrouped activations are the same for every row, so they are prepared
  // once per call (per row they would cost a third of the work) and kept per thread.
  MOE_AVX2 static void gemv_row(const QMatrix& w, int64_t r, int64_t pf_row, const Q8x32View& a,
                                const PairActs* prep, float* y) {
    using Block = typename C::Block;
    const PrefetchRows<1> pf(w, r, pf_row);
    const Block* const wr[1] = {reinterpret_cast<const Block*>(w.row(r))};
    const Q8x32View av[1] = {a};
    __m256 acc[1][1] = {{_mm256_setzero_ps()}};
    const int64_t nb = w.cols / 32, nb4 = nb / 4 * 4;
    int64_t b = 0;
    for (; b < nb4; b += 4) {
      pf.template fetch<2>(0, b * int64_t(sizeof(Block)));
      group<1>(wr[0] + b, *reinterpret_cast<const PairActs(*)[1]>(prep + b / 4), acc[0]);
    }
    for (; b < nb; ++b) one_block<C, 1, 1>(wr, av, b, acc);
    y[r] = hsum(acc[0][0]);
  }

  MOE_AVX2 static void prepare_all(const Q8x32View& a, int64_t groups, PairActs* prep) {
    for (int64_t g = 0; g < groups; ++g) prep[g] = prepare(a, 4 * g);
  }

  static void gemv(const QMatrix& w, const PackedActs& x, float* y, int64_t r0, int64_t r1) {
    // Not std::allocator: instantiated outside AVX2 code it may not honour the 32-byte
    // alignment of __m256i members.
    thread_local std::vector<PairActs, detail::CacheAlignedAllocator<PairActs>> prep;
    const int64_t groups = w.cols / 128;
    if (int64_t(prep.size()) < groups) prep.resize(size_t(groups));
    const Q8x32View a = q8x32_view(x, 0);
    prepare_all(a, groups, prep.data());
    gemv_loop(w, r0, r1, [&](int64_t r, int64_t pf_row) { gemv_row(w, r, pf_row, a, prep.data(), y); });
  }
};

template <class K>
void rows(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  run_tiles<K>(w, x, y, ldy, r0, r1);
}

template <class C>
void pair_rows(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  if (x.n_tokens() == 1) return PairKernel<C>::gemv(w, x, y, r0, r1);
  run_tiles<PairKernel<C>>(w, x, y, ldy, r0, r1);
}

// ---- activation packing -----------------------------------------------------------------

MOE_AVX2_INLINE float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// 32 floats times id, rounded to nearest even (the MXCSR default, as nearbyint), to int8.
MOE_AVX2_INLINE __m256i quantize32(const float* x, __m256 id) {
  const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), id));
  const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), id));
  const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), id));
  const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), id));
  // The packs interleave 128-bit lanes; the permute restores element order.
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
  const __m256i q = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  return _mm256_max_epi8(q, _mm256_set1_epi8(-127));
}

}  // namespace

MOE_AVX2 void avx2_pack_q8(const float* x, int64_t n, int block, uint8_t* token, const ActLayout& l) {
  int8_t* qs = reinterpret_cast<int8_t*>(token);
  float* d = reinterpret_cast<float*>(token + l.scales_at);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t b = 0; b < n / block; ++b) {
    const float* xb = x + b * block;
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < block; i += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(xb + i), abs_mask));
    const float amax = hmax(m);
    const float id = amax != 0 ? 127.0f / amax : 0.0f;
    d[b] = amax / 127.0f;
    const __m256 vid = _mm256_set1_ps(id);
    for (int i = 0; i < block; i += 32) {
      const __m256i q = quantize32(xb + i, vid);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + b * block + i), q);
      // Sums of 8 codes each via sad on the codes offset to unsigned (+128 per code).
      const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(q, _mm256_set1_epi8(-128)), _mm256_setzero_si256());
      const __m128i lo = _mm256_castsi256_si128(sad), hi = _mm256_extracti128_si256(sad, 1);
      const int s0 = _mm_cvtsi128_si32(_mm_add_epi64(lo, _mm_unpackhi_epi64(lo, lo))) - 2048;
      const int s1 = _mm_cvtsi128_si32(_mm_add_epi64(hi, _mm_unpackhi_epi64(hi, hi))) - 2048;
      if (block == 32) {
        reinterpret_cast<int32_t*>(token + l.sums_at)[b] = s0 + s1;
        reinterpret_cast<int32_t*>(token + l.offsets_at)[b] = -128 * (s0 + s1);
      } else {
        int16_t* bs = reinterpret_cast<int16_t*>(token + l.sums_at) + (b * block + i) / 16;
        bs[0] = int16_t(s0);
        bs[1] = int16_t(s1);
      }
    }
  }
}

RowsFn avx2_rows(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return rows<FloatKernel<F32Load>>;
    case GgmlType::F16: return rows<FloatKernel<F16Load>>;
    case GgmlType::BF16: return rows<FloatKernel<BF16Load>>;
    case GgmlType::Q8_0: return rows<Q8_0Kernel>;
    case GgmlType::Q4_0: return pair_rows<Q4Codes<BlockQ4_0, 8>>;
    case GgmlType::Q5_0: return pair_rows<Q5Codes<BlockQ5_0, 16>>;
    case GgmlType::Q4_1: return pair_rows<Q4Codes<BlockQ4_1, 0>>;
    case GgmlType::Q5_1: return pair_rows<Q5Codes<BlockQ5_1, 0>>;
    default: return nullptr;
  }
}

}  // namespace moe::mm
