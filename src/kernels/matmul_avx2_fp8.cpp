// AVX2 + FMA + F16C kernel for fp8_e4m3 weights (DeepSeek FP8 blocks) against f32
// activations (the f32/f16/bf16 kernels' format). Codes are widened exactly through
// vcvtph2ps (see fp8x32_to_ps in matmul_avx2.h), about 13 instructions per 32 weights.
#include <cstring>

#include "kernels/matmul_avx2.h"
#include "kernels/matmul_impl.h"
#include "kernels/quant_blocks.h"

namespace moe::mm {
namespace {

using namespace avx2;

// Per (row, token), every 32 codes: their products with the activations summed in a short
// chain (a multiply and three FMAs), then scaled by 256 * d (d the block's scale) into the
// pair's accumulator with one FMA. The short chains do not depend on each other, so even
// one token keeps enough FMAs in flight (one chain through a block's 128 codes measured about
// 20% slower for decode), and one accumulator per pair leaves registers for a 2 x 4 tile:
// each decoded weight vector serves four tokens, and each activation vector, loaded once
// from L2 (a token of 7168 floats does not fit L1), serves two rows.
//
// A (row, token) pair gets the same operations in the same order whatever the tile, decode
// included, so a token's result is bit-identical alone or in a batch.
struct Fp8Kernel {
  static constexpr int kRows = 2, kTokens = 4;

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
    const int64_t nb = w.cols / kQF8;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t at = b * int64_t(sizeof(BlockF8E4M3));
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        // A block spans parts of three cache lines: one request per line.
        if constexpr (T == 1) pf.template fetch<3>(r, at);
        float d;
        std::memcpy(&d, wr[r] + at, 4);
        const __m256 s = _mm256_set1_ps(d * 256.0f);  // exact: undoes the decode's 2^-8
#pragma GCC unroll 4
        for (int k = 0; k < kQF8; k += 32) {
          __m256 wv[4];
          fp8x32_to_ps(wr[r] + at + 4 + k, wv);
#pragma GCC unroll 4
          for (int t = 0; t < T; ++t) {
            const float* ak = a[t] + b * kQF8 + k;
            __m256 q = _mm256_mul_ps(wv[0], _mm256_loadu_ps(ak + kFp8x32Order[0]));
            q = _mm256_fmadd_ps(wv[1], _mm256_loadu_ps(ak + kFp8x32Order[1]), q);
            q = _mm256_fmadd_ps(wv[2], _mm256_loadu_ps(ak + kFp8x32Order[2]), q);
            q = _mm256_fmadd_ps(wv[3], _mm256_loadu_ps(ak + kFp8x32Order[3]), q);
            acc[r][t] = _mm256_fmadd_ps(q, s, acc[r][t]);
          }
        }
      }
    }
    store_tile(acc, y, ldy, row, tok);
  }
};

void rows(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  run_tiles<Fp8Kernel>(w, x, y, ldy, r0, r1);
}

}  // namespace

RowsFn avx2_rows_fp8() { return rows; }

}  // namespace moe::mm
