// fp8_e4m3 weights: the AVX2 decode trick over every code, and matmul on every path
// against matmul_ref for many token counts, row ranges and widths (matmul_test covers the
// properties shared by all types).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/fp8.h"
#include "kernels/matmul.h"
#include "kernels/matmul_avx2.h"
#include "kernels/quant.h"

namespace moe {
namespace {

constexpr GgmlType kFp8 = GgmlType::F8_E4M3_B128;

bool is_nan_code(int c) { return (c & 0x7F) == 0x7F; }

// The claim the AVX2 kernel rests on: sign << 15 | (code & 0x7F) << 7, read as an IEEE
// half, is e4m3(code) * 2^-8 for every non-NaN code, subnormals included.
TEST(Fp8Decode, HalfBitPatternIsE4m3TimesTwoToTheMinus8) {
  for (int c = 0; c < 256; ++c) {
    if (is_nan_code(c)) continue;
    const uint16_t h = uint16_t(((c & 0x80) << 8) | ((c & 0x7F) << 7));
    const float f = fp16_to_f32(h);
    EXPECT_EQ(f, std::ldexp(fp8_e4m3_to_f32(uint8_t(c)), -8)) << c;
    EXPECT_EQ(std::signbit(f), c >= 128) << c;
  }
}

MOE_AVX2 void decode_all_avx2(const uint8_t (&codes)[256], float (&out)[256]) {
  for (int k = 0; k < 256; k += 32) {
    __m256 w[4];
    mm::avx2::fp8x32_to_ps(codes + k, w);
    for (int j = 0; j < 4; ++j) _mm256_storeu_ps(out + k + mm::avx2::kFp8x32Order[j], w[j]);
  }
}

TEST(Fp8Decode, Avx2DecoderGivesEveryCodeTimesTwoToTheMinus8) {
  if (!cpu_features().has_avx2_fma()) GTEST_SKIP() << "no AVX2+FMA+F16C on this CPU";
  uint8_t codes[256];
  for (int c = 0; c < 256; ++c) codes[c] = uint8_t(255 - c);  // not in element order
  float out[256];
  decode_all_avx2(codes, out);
  for (int i = 0; i < 256; ++i) {
    const int c = codes[i];
    // NaN codes are not meant to occur in weights; the trick reads them as +-480.
    const float want = is_nan_code(c) ? (c & 0x80 ? -480.0f : 480.0f) : fp8_e4m3_to_f32(uint8_t(c));
    EXPECT_EQ(out[i], std::ldexp(want, -8)) << c;
    EXPECT_EQ(std::signbit(out[i]), c >= 128) << c;
  }
}

std::vector<MatmulPath> paths() {
  std::vector<MatmulPath> p;
  for (MatmulPath path : {MatmulPath::Generic, MatmulPath::Avx2, MatmulPath::Avx512}) {
    if (matmul_path_available(path)) p.push_back(path);
  }
  return p;
}

std::vector<float> gaussian(size_t n, std::mt19937& rng, float sigma) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(rng);
  return x;
}

struct Weights {
  int64_t rows, cols;
  std::vector<uint8_t> bytes;
  QMatrix m() const { return make_qmatrix(kFp8, rows, cols, bytes.data()); }
};

// Quantized Gaussian weights, a few of them small enough to take subnormal codes.
Weights quantized(int64_t rows, int64_t cols, std::mt19937& rng) {
  Weights w{rows, cols, std::vector<uint8_t>(row_bytes(kFp8, cols) * size_t(rows))};
  auto f = gaussian(size_t(rows * cols), rng, 0.05f);
  for (size_t i = 0; i < f.size(); i += 7) f[i] *= 1e-3f;
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row(kFp8, f.data() + r * cols, w.bytes.data() + size_t(r) * row_bytes(kFp8, cols), cols);
  }
  return w;
}

// Raw blocks as a checkpoint may hold them: any non-NaN code, scales over many magnitudes.
Weights raw(int64_t rows, int64_t cols, std::mt19937& rng) {
  Weights w{rows, cols, std::vector<uint8_t>(row_bytes(kFp8, cols) * size_t(rows))};
  std::uniform_int_distribution<int> code(0, 253), log_scale(-20, 4);
  for (size_t at = 0; at < w.bytes.size(); at += 132) {
    const float d = std::ldexp(1.3f, log_scale(rng));
    std::memcpy(w.bytes.data() + at, &d, 4);
    for (int i = 0; i < 128; ++i) {
      const int c = code(rng);
      w.bytes[at + 4 + size_t(i)] = uint8_t(c < 0x7F ? c : c + 1);  // skips 0x7F; 0xFF is out of range
    }
  }
  return w;
}

// The float types' tolerance: activations stay exact, so only rounding, 1e-5 relative to
// sum |w x| (the reference accumulates in double).
void expect_matches_reference(const Weights& w, const std::vector<float>& x, int64_t nt, const std::vector<float>& y,
                              int64_t ldy, int64_t r0, int64_t r1, const std::string& what) {
  std::vector<float> ref(size_t(nt * w.rows)), row(size_t(w.cols));
  matmul_ref(w.m(), x.data(), nt, ref.data());
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(kFp8, w.m().row(r), row.data(), w.cols);
    for (int64_t t = 0; t < nt; ++t) {
      const float got = y[size_t(t * ldy + r)];
      if (r < r0 || r >= r1) {
        ASSERT_EQ(got, -7.0f) << what << ": row " << r << " outside the range was written";
        continue;
      }
      double mag = 0;
      for (int64_t i = 0; i < w.cols; ++i) mag += std::fabs(double(row[size_t(i)]) * x[size_t(t * w.cols + i)]);
      ASSERT_NEAR(got, ref[size_t(t * w.rows + r)], 1e-5 * mag + 1e-30)
          << what << " row " << r << " token " << t;
    }
  }
}

TEST(Fp8Matmul, EveryPathMatchesReferenceForTokenCountsRowRangesAndWidths) {
  std::mt19937 rng(17);
  const int64_t rows = 37;
  for (int64_t cols : {128, 640, 4096}) {
    const Weights w = quantized(rows, cols, rng);
    for (int64_t nt : {1, 2, 3, 4, 5, 7, 16, 17, 33}) {
      const auto x = gaussian(size_t(nt * cols), rng, 1.0f);
      PackedActs packed;
      packed.pack(kFp8, x.data(), nt, cols, cols);
      for (MatmulPath p : paths()) {
        for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, rows}, {3, 34}, {5, 6}}) {
          const int64_t ldy = rows + 3;
          std::vector<float> y(size_t(nt * ldy), -7.0f);
          matmul_rows_with(p, w.m(), packed, y.data(), ldy, r0, r1);
          expect_matches_reference(w, x, nt, y, ldy, r0, r1,
                                   std::string(matmul_path_name(p)) + " cols " + std::to_string(cols) +
                                       " tokens " + std::to_string(nt) + " rows [" + std::to_string(r0) + ", " +
                                       std::to_string(r1) + ")");
        }
      }
    }
  }
}

TEST(Fp8Matmul, RawCodesOfEveryKindAndScalesOfEveryMagnitude) {
  std::mt19937 rng(23);
  const int64_t rows = 21, cols = 1024, nt = 5;
  const Weights w = raw(rows, cols, rng);
  const auto x = gaussian(size_t(nt * cols), rng, 1.0f);
  PackedActs packed;
  packed.pack(kFp8, x.data(), nt, cols, cols);
  for (MatmulPath p : paths()) {
    std::vector<float> y(size_t(nt * rows), -7.0f);
    matmul_rows_with(p, w.m(), packed, y.data(), rows, 0, rows);
    expect_matches_reference(w, x, nt, y, rows, 0, rows, matmul_path_name(p));
  }
}

TEST(Fp8Matmul, TakesTheFloatTypesActivations) {
  std::mt19937 rng(29);
  const int64_t rows = 70, cols = 768, nt = 20;
  const Weights w = quantized(rows, cols, rng);
  const auto x = gaussian(size_t(nt * cols), rng, 1.0f);
  PackedActs packed;
  packed.pack(GgmlType::BF16, x.data(), nt, cols, cols);  // f32 activations, shared with bf16
  ASSERT_TRUE(packed.fits(kFp8));
  EXPECT_FALSE(packed.fits(GgmlType::Q8_0));
  std::vector<float> a(size_t(nt * rows)), b(size_t(nt * rows));
  matmul_rows(w.m(), packed, a.data(), rows, 0, rows);
  PackedActs own;
  own.pack(kFp8, x.data(), nt, cols, cols);
  matmul_rows(w.m(), own, b.data(), rows, 0, rows);
  EXPECT_EQ(a, b);
  EXPECT_THROW(own.pack(kFp8, x.data(), 1, 640 + 64, 640 + 64), Error);  // not whole blocks
}

}  // namespace
}  // namespace moe
