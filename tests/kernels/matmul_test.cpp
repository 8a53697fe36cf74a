// Every weight type on every code path this CPU has, against matmul_ref.
//
// Tolerance: the kernels quantize the activations (q8 with one scale d = max|x| / 127 per
// 32 or 256 values, rounded to nearest), so each activation is off by at most d / 2 and an
// output by at most sum_i |w_i| * d(i) / 2. That bound is computed per output from the
// dequantized weights, plus 1e-5 * sum_i |w_i x_i| for float rounding (the reference sums
// in double). Float weights keep exact activations and get only the rounding term.
#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/matmul_impl.h"
#include "kernels/quant.h"

namespace moe {
namespace {

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16,
                           GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0,
                           GgmlType::Q4_1, GgmlType::Q5_1,
                           GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                           GgmlType::F8_E4M3_B128};

// Column counts for the shared tests: `n` for 1- and 32-wide blocks, and whole blocks
// for the wider ones.
int64_t test_cols(GgmlType t, int64_t n, int64_t k_quant, int64_t fp8) {
  const int64_t block = traits(t).block_size;
  return block == 256 ? k_quant : block == 128 ? fp8 : n;
}

// The paths this CPU runs; the ones it cannot are named once on stderr, so a log shows
// what went untested here.
std::vector<MatmulPath> paths() {
  std::vector<MatmulPath> p;
  for (MatmulPath path : {MatmulPath::Generic, MatmulPath::Avx2, MatmulPath::Avx512}) {
    if (matmul_path_available(path)) {
      p.push_back(path);
    } else {
      static bool said[3] = {};
      if (!std::exchange(said[int(path)], true)) {
        std::fprintf(stderr, "matmul_test: the %s path is not available on this CPU, not tested\n",
                     matmul_path_name(path));
      }
    }
  }
  return p;
}

std::vector<float> gaussian(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(rng);
  return x;
}

struct Weights {
  GgmlType type;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;
  std::vector<float> dequant;  // [rows, cols]
  QMatrix m() const { return make_qmatrix(type, rows, cols, bytes.data()); }
};

Weights make_weights(GgmlType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  Weights w{t, rows, cols, std::vector<uint8_t>(row_bytes(t, cols) * size_t(rows)),
            std::vector<float>(size_t(rows * cols))};
  const auto f = gaussian(size_t(rows * cols), rng, 0.05f);
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row(t, f.data() + r * cols, w.bytes.data() + size_t(r) * row_bytes(t, cols), cols);
    dequantize_row(t, w.bytes.data() + size_t(r) * row_bytes(t, cols), w.dequant.data() + r * cols, cols);
  }
  return w;
}

// Largest error the activation quantization of token x can cause on each output (on
// `path`, which may round them to bf16).
std::vector<double> tolerance(const Weights& w, const float* x, MatmulPath path) {
  const double bf16 = matmul_rounds_to_bf16(path, w.type) ? std::ldexp(1.0, -8) : 0.0;
  const mm::ActFormat f = mm::act_format(w.type);
  const int64_t block = f == mm::ActFormat::Q8x32 ? 32 : f == mm::ActFormat::Q8x256 ? 256 : 0;
  std::vector<double> half_step(size_t(w.cols), 0.0);
  for (int64_t b = 0; block != 0 && b < w.cols / block; ++b) {
    double amax = 0;
    for (int64_t i = 0; i < block; ++i) amax = std::max(amax, double(std::fabs(x[b * block + i])));
    for (int64_t i = 0; i < block; ++i) half_step[size_t(b * block + i)] = amax / 127 / 2;
  }
  std::vector<double> tol(size_t(w.rows));
  for (int64_t r = 0; r < w.rows; ++r) {
    double q = 0, mag = 0;
    for (int64_t i = 0; i < w.cols; ++i) {
      const double wi = std::fabs(double(w.dequant[size_t(r * w.cols + i)]));
      q += wi * half_step[size_t(i)];
      mag += wi * std::fabs(double(x[i]));
    }
    tol[size_t(r)] = q * 1.0001 + (1e-5 + bf16) * mag + 1e-30;
  }
  return tol;
}

void expect_close_to_ref(const Weights& w, const std::vector<float>& x, int64_t n_tokens,
                         const std::vector<float>& y, int64_t ldy, MatmulPath path, const std::string& what) {
  std::vector<float> ref(size_t(n_tokens * w.rows));
  matmul_ref(w.m(), x.data(), n_tokens, ref.data());
  for (int64_t t = 0; t < n_tokens; ++t) {
    const auto tol = tolerance(w, x.data() + t * w.cols, path);
    for (int64_t r = 0; r < w.rows; ++r) {
      ASSERT_NEAR(y[size_t(t * ldy + r)], ref[size_t(t * w.rows + r)], tol[size_t(r)])
          << what << " row " << r << " token " << t;
    }
  }
}

std::vector<int64_t> col_sizes(GgmlType t) {
  const int64_t block = traits(t).block_size;
  if (block == 1) return {1, 13, 40, 520};
  // 544 and 4128: groups of four blocks (AVX2) and of 16 (AVX-512) and one block left
  // over; 1088: two groups of 16 and a pair.
  if (block == 32) return {32, 96, 544, 1088, 4128};
  if (block == 128) return {128, 384, 1152, 4096};
  return {256, 768, 2304};
}

TEST(Matmul, EveryTypeEveryPathMatchesReference) {
  std::mt19937 rng(42);
  for (GgmlType t : kTypes) {
    for (int64_t cols : col_sizes(t)) {
      for (int64_t rows : {1, 6, 13}) {
        const Weights w = make_weights(t, rows, cols, rng);
        for (int64_t nt : {1, 2, 3, 5, 17}) {
          const auto x = gaussian(size_t(nt * cols), rng);
          PackedActs packed;
          packed.pack(t, x.data(), nt, cols, cols);
          for (MatmulPath p : paths()) {
            std::vector<float> y(size_t(nt * rows), NAN);
            matmul_rows_with(p, w.m(), packed, y.data(), rows, 0, rows);
            expect_close_to_ref(w, x, nt, y, rows, p,
                                std::string(type_name(t)) + " " + matmul_path_name(p) + " " +
                                    std::to_string(rows) + "x" + std::to_string(cols) + " n=" +
                                    std::to_string(nt));
          }
        }
      }
    }
  }
}

// A token's outputs must be bit-identical whether it is multiplied alone (decode GEMV) or
// inside a batch at any position (prefill tiles and their tails): the engine promises the
// same logits for a request alone or batched.
TEST(Matmul, TokenResultDoesNotDependOnTheBatch) {
  std::mt19937 rng(11);
  const int64_t rows = 37, n_tokens = 11;
  for (GgmlType t : kTypes) {
    // 544: the 32-wide block types also take their one-block step after the groups of four.
    const int64_t cols = test_cols(t, 544, 512, 640);
    const Weights w = make_weights(t, rows, cols, rng);
    const auto x = gaussian(size_t(n_tokens * cols), rng);
    for (MatmulPath p : paths()) {
      PackedActs batch, one;
      batch.pack(t, x.data(), n_tokens, cols, cols);
      std::vector<float> yb(static_cast<size_t>(n_tokens * rows)), y1(static_cast<size_t>(rows));
      matmul_rows_with(p, w.m(), batch, yb.data(), rows, 0, rows);
      for (int64_t tok = 0; tok < n_tokens; ++tok) {
        one.pack(t, x.data() + tok * cols, 1, cols, cols);
        matmul_rows_with(p, w.m(), one, y1.data(), rows, 0, rows);
        for (int64_t r = 0; r < rows; ++r) {
          ASSERT_EQ(y1[size_t(r)], yb[size_t(tok * rows + r)])
              << type_name(t) << " on " << matmul_path_name(p) << ", token " << tok << " row " << r;
        }
      }
    }
  }
}

TEST(Matmul, PathsAgreeClosely) {
  // Same packed activations, exact integer block sums: paths differ only in the order of
  // float additions (and bf16 weights where a path rounds the activations to bf16).
  if (paths().size() < 2) GTEST_SKIP() << "only the generic path on this CPU";
  std::mt19937 rng(5);
  for (GgmlType t : kTypes) {
    const int64_t cols = test_cols(t, 1056, 1024, 1152), rows = 37, nt = 9;
    const Weights w = make_weights(t, rows, cols, rng);
    const auto x = gaussian(size_t(nt * cols), rng);
    PackedActs packed;
    packed.pack(t, x.data(), nt, cols, cols);
    std::vector<float> a(size_t(nt * rows)), b(size_t(nt * rows));
    matmul_rows_with(MatmulPath::Generic, w.m(), packed, a.data(), rows, 0, rows);
    for (MatmulPath p : paths()) {
      matmul_rows_with(p, w.m(), packed, b.data(), rows, 0, rows);
      for (int64_t t2 = 0; t2 < nt; ++t2) {
        for (int64_t r = 0; r < rows; ++r) {
          double mag = 0;
          for (int64_t i = 0; i < cols; ++i) {
            mag += std::fabs(double(w.dequant[size_t(r * cols + i)]) * x[size_t(t2 * cols + i)]);
          }
          const double bf16 = matmul_rounds_to_bf16(p, t) ? std::ldexp(1.0, -8) : 0.0;
          ASSERT_NEAR(a[size_t(t2 * rows + r)], b[size_t(t2 * rows + r)], (2e-6 + bf16) * mag)
              << type_name(t) << " on " << matmul_path_name(p);
        }
      }
    }
  }
}

TEST(Matmul, PackingIsIdenticalOnEveryPath) {
  if (!cpu_features().has_avx2_fma()) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937 rng(9);
  for (const auto f : {mm::ActFormat::Q8x32, mm::ActFormat::Q8x256}) {
    const int64_t cols = 2048;
    auto x = gaussian(size_t(cols), rng);
    x[5] = 0.0f;
    std::fill(x.begin() + 256, x.begin() + 512, 0.0f);  // all-zero blocks
    x[700] = 1e4f;                                       // an outlier
    x[701] = -1e4f;
    const auto l = mm::act_layout(f, cols);
    std::vector<uint8_t> a(size_t(l.bytes)), b(size_t(l.bytes));
    const int block = f == mm::ActFormat::Q8x32 ? 32 : 256;
    mm::generic_pack_q8(x.data(), cols, block, a.data(), l);
    mm::avx2_pack_q8(x.data(), cols, block, b.data(), l);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), size_t(l.sums_at)), 0);
    const size_t sums = block == 32 ? size_t(cols / 32) * 4 : size_t(cols / 16) * 2;
    EXPECT_EQ(std::memcmp(a.data() + l.sums_at, b.data() + l.sums_at, sums), 0);
  }
}

TEST(Matmul, RowRangesStridesAndThreads) {
  std::mt19937 rng(3);
  ThreadPool pool(3);
  for (GgmlType t : kTypes) {
    const int64_t cols = test_cols(t, 160, 512, 256), rows = 45, nt = 6;
    const Weights w = make_weights(t, rows, cols, rng);
    const auto x = gaussian(size_t(nt * cols), rng);
    PackedActs packed;
    packed.pack(t, x.data(), nt, cols, cols);

    // Only [r0, r1) is written, with the output leading dimension respected.
    const int64_t ldy = rows + 7, r0 = 5, r1 = 31;
    std::vector<float> part(size_t(nt * ldy), -7.0f), full(size_t(nt * rows));
    matmul_rows(w.m(), packed, part.data(), ldy, r0, r1);
    matmul_rows(w.m(), packed, full.data(), rows, 0, rows);
    for (int64_t tt = 0; tt < nt; ++tt) {
      for (int64_t r = 0; r < ldy; ++r) {
        const float v = part[size_t(tt * ldy + r)];
        if (r >= r0 && r < r1) {
          EXPECT_EQ(v, full[size_t(tt * rows + r)]) << type_name(t);
        } else {
          EXPECT_EQ(v, -7.0f) << type_name(t);
        }
      }
    }

    // Threaded matmul computes each row exactly as matmul_rows does.
    std::vector<float> threaded(size_t(nt * rows));
    matmul(w.m(), x.data(), nt, threaded.data(), pool);
    EXPECT_EQ(threaded, full) << type_name(t);

    // An expert's slice of a 3-D tensor: rows further apart than their bytes.
    const size_t rb = row_bytes(t, cols), stride = rb + 64;
    std::vector<uint8_t> spaced(stride * size_t(rows));
    for (int64_t r = 0; r < rows; ++r) std::memcpy(spaced.data() + size_t(r) * stride, w.bytes.data() + size_t(r) * rb, rb);
    const QMatrix sm{t, rows, cols, spaced.data(), stride};
    std::vector<float> strided(size_t(nt * rows));
    matmul_rows(sm, packed, strided.data(), rows, 0, rows);
    EXPECT_EQ(strided, full) << type_name(t);
  }
}

TEST(Matmul, PackedActivationsAreSharedAcrossCompatibleTypes) {
  std::mt19937 rng(8);
  const auto x = gaussian(512, rng);
  PackedActs p;
  p.pack(GgmlType::Q4_0, x.data(), 1, 512, 512);
  EXPECT_TRUE(p.fits(GgmlType::Q8_0));
  EXPECT_TRUE(p.fits(GgmlType::Q5_0));
  EXPECT_FALSE(p.fits(GgmlType::Q4_K));
  EXPECT_FALSE(p.fits(GgmlType::F16));
  EXPECT_FALSE(p.fits(GgmlType::F8_E4M3_B128));
  const Weights k = make_weights(GgmlType::Q4_K, 4, 512, rng);
  std::vector<float> y(4);
  EXPECT_THROW(matmul_rows(k.m(), p, y.data(), 4, 0, 4), Error);
  const Weights q = make_weights(GgmlType::Q8_0, 4, 256, rng);
  EXPECT_THROW(matmul_rows(q.m(), p, y.data(), 4, 0, 4), Error);  // 512 != 256 columns
  EXPECT_THROW(p.pack(GgmlType::Q6_K, x.data(), 1, 500, 500), Error);
}

TEST(Matmul, ParallelPackMatchesSerial) {
  std::mt19937 rng(4);
  ThreadPool pool(2);
  const int64_t nt = 40, cols = 768;
  const auto x = gaussian(size_t(nt * cols), rng);
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q6_K, GgmlType::F16}) {
    PackedActs a, b;
    a.pack(t, x.data(), nt, cols, cols);
    b.pack(t, x.data(), nt, cols, cols, pool);
    ASSERT_EQ(a.token_bytes(), b.token_bytes());
    EXPECT_EQ(std::memcmp(a.token(0), b.token(0), a.token_bytes() * size_t(nt)), 0) << type_name(t);
  }
}

}  // namespace
}  // namespace moe
