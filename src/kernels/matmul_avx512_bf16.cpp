// AVX-512 BF16 kernel for bf16 weights against f32 activations, on CPUs with
// AVX512_BF16 (vdpbf16ps).
//
// vdpbf16ps multiplies 32 bf16 pairs and adds each pair's two products to one of 16 float
// lanes: 32 products per instruction against 16 for an FMA on floats converted from bf16.
// The activations are rounded to bf16 for it (round to nearest even, vcvtne2ps2bf16): a
// decode GEMV converts them as it goes (two 16-float loads and one conversion per 32
// values, shared by the tile's rows), a call with more tokens converts them all once into
// a per-thread buffer that its tiles then read like the weights. The results carry a relative error of up to 2^-9 per activation that the AVX2 kernel, which
// multiplies them as floats, does not; bf16 weights hold only 8 significant bits
// themselves. The weights are one 64-byte load per 32 values, shared by the tile's tokens.
// A ragged end of a row is one masked step.
//
// A (row, token) pair is summed in the same order whatever the tile, so a token's result
// is bit-identical alone or in a batch.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <vector>

#include "kernels/matmul_avx2.h"
#include "kernels/matmul_impl.h"

#define MOE_AVX512_BF16_TARGET "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c"
#define MOE_AVX512_BF16 __attribute__((target(MOE_AVX512_BF16_TARGET)))
#define MOE_AVX512_BF16_INLINE __attribute__((target(MOE_AVX512_BF16_TARGET), always_inline)) inline

namespace moe::mm {
namespace {

// The activations of a call with several tokens, converted once: token t's bf16 values at
// tokens + t * ld. Set by rows_bf16 for the tiles of that call on this thread.
struct ConvertedActs {
  const uint16_t* tokens = nullptr;
  int64_t ld = 0;
};
thread_local ConvertedActs converted;

// 32 activations from column i of token a as bf16 (n < 32: the first n, zeros above).
template <bool kConverted>
MOE_AVX512_BF16_INLINE __m512bh acts32(const void* a, int64_t i, int n) {
  if constexpr (kConverted) {
    const __mmask32 m = n >= 32 ? __mmask32(0xFFFFFFFF) : __mmask32((1u << n) - 1);
    return (__m512bh)_mm512_maskz_loadu_epi16(m, static_cast<const uint16_t*>(a) + i);
  } else {
    const float* f = static_cast<const float*>(a) + i;
    const __mmask16 lo = n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
    const __mmask16 hi = n >= 32 ? __mmask16(0xFFFF) : n <= 16 ? __mmask16(0) : __mmask16((1u << (n - 16)) - 1);
    return _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, f + 16), _mm512_maskz_loadu_ps(lo, f));
  }
}

// kConverted: the tokens come from `converted`, else from the packed f32 activations.
template <bool kConverted>
struct Bf16Kernel512 {
  static constexpr int kRows = 4, kTokens = 4;

  template <int R, int T>
  MOE_AVX512_BF16 static void tile(const QMatrix& w, int64_t row, const PackedActs& x, int64_t tok, float* y,
                                   int64_t ldy, int64_t pf_row) {
    const avx2::PrefetchRows<R> pf(w, row, pf_row);
    const uint8_t* wr[R];
    const void* a[T];
    for (int r = 0; r < R; ++r) wr[r] = w.row(row + r);
    for (int t = 0; t < T; ++t) {
      if constexpr (kConverted) {
        a[t] = converted.tokens + (tok + t) * converted.ld;
      } else {
        a[t] = f32_view(x, tok + t);
      }
    }
    __m512 acc[R][T];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
    }
    // One loop for the whole row, the ragged end included (its masks keep n < 32 values):
    // with the body in a helper taking the accumulators by reference, GCC kept them in
    // memory and stored all of them at every step.
    for (int64_t i = 0; i < w.cols; i += 32) {
      const int n = int(std::min<int64_t>(32, w.cols - i));
      const __mmask32 wm = n == 32 ? __mmask32(0xFFFFFFFF) : __mmask32((1u << n) - 1);
      __m512bh av[T];
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) av[t] = acts32<kConverted>(a[t], i, n);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        if constexpr (T == 1) pf.template fetch<1>(r, 2 * i);
        const __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(wm, wr[r] + 2 * i);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], av[t], wv);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) y[(tok + t) * ldy + row + r] = _mm512_reduce_add_ps(acc[r][t]);
    }
  }
};

MOE_AVX512_BF16 void convert_tokens(const PackedActs& x, uint16_t* dst, int64_t ld) {
  const int64_t cols = x.cols();
  for (int64_t t = 0; t < x.n_tokens(); ++t) {
    const float* f = f32_view(x, t);
    for (int64_t i = 0; i < cols; i += 32) {
      const int n = int(std::min<int64_t>(32, cols - i));
      const __mmask32 m = n >= 32 ? __mmask32(0xFFFFFFFF) : __mmask32((1u << n) - 1);
      _mm512_mask_storeu_epi16(dst + t * ld + i, m, (__m512i)acts32<false>(f, i, n));
    }
  }
}

void rows_bf16(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  if (x.n_tokens() == 1) return run_tiles<Bf16Kernel512<false>>(w, x, y, ldy, r0, r1);
  thread_local std::vector<uint16_t> buffer;
  const int64_t ld = round_up(x.cols(), 32);
  buffer.resize(size_t(x.n_tokens() * ld));
  convert_tokens(x, buffer.data(), ld);
  converted = {buffer.data(), ld};
  run_tiles<Bf16Kernel512<true>>(w, x, y, ldy, r0, r1);
  converted = {};
}

}  // namespace

RowsFn avx512_rows_bf16() { return rows_bf16; }

}  // namespace moe::mm
