// Weights regrouped 16 rows at a time (q8_0_r16, q4_K_r16, q6_K_r16, q5_0_r16): the
// regrouping is lossless, and every path computes from them what it computes from the plain rows (the AVX-512
// kernels within the activation-quantization bound of the reference, the others through
// the plain type's kernels exactly), over row ranges that cut groups, token tiles and
// their tails, with tokens that drive the integer sums to their extremes.
#include "kernels/regrouped.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/quant.h"
#include "kernels/quant_blocks.h"

namespace moe {
namespace {

class Regrouped : public testing::TestWithParam<GgmlType> {
 protected:
  GgmlType plain() const { return GetParam(); }
  // Also the activations' quantization block: 32 values, or 256 for the k-quants.
  int64_t block() const { return traits(plain()).block_size; }
};

std::vector<uint8_t> plain_rows(GgmlType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> f(size_t(rows * cols));
  for (auto& v : f) v = dist(rng);
  const size_t rb = row_bytes(t, cols);
  std::vector<uint8_t> bytes(rb * size_t(rows));
  for (int64_t r = 0; r < rows; ++r) quantize_row(t, f.data() + r * cols, bytes.data() + size_t(r) * rb, cols);
  if (t == GgmlType::Q8_0) {
    // The extreme codes, which the +128 offset maps to 0 and 255.
    reinterpret_cast<BlockQ8_0*>(bytes.data())[0].qs[0] = -128;
    reinterpret_cast<BlockQ8_0*>(bytes.data())[0].qs[1] = 127;
  } else if (t == GgmlType::Q5_0) {
    // Row 1's first block at the largest codes, row 2's at the smallest.
    BlockQ5_0& big = reinterpret_cast<BlockQ5_0*>(bytes.data() + rb)[0];
    BlockQ5_0& low = reinterpret_cast<BlockQ5_0*>(bytes.data() + 2 * rb)[0];
    std::memset(big.qs, 0xff, sizeof(big.qs));
    std::memset(big.qh, 0xff, sizeof(big.qh));
    std::memset(low.qs, 0, sizeof(low.qs));
    std::memset(low.qh, 0, sizeof(low.qh));
  } else if (t == GgmlType::Q6_K) {
    // Row 1's first super-block at the largest codes and scales, row 2's at the smallest
    // codes and the most negative scales: the kernel's integer sums at their bounds.
    BlockQ6_K& big = reinterpret_cast<BlockQ6_K*>(bytes.data() + rb)[0];
    BlockQ6_K& low = reinterpret_cast<BlockQ6_K*>(bytes.data() + 2 * rb)[0];
    std::memset(big.ql, 0xff, sizeof(big.ql));
    std::memset(big.qh, 0xff, sizeof(big.qh));
    std::memset(big.scales, 127, sizeof(big.scales));
    std::memset(low.ql, 0, sizeof(low.ql));
    std::memset(low.qh, 0, sizeof(low.qh));
    std::memset(low.scales, 0x80, sizeof(low.scales));
  } else {
    // Row 1's first super-block at the largest codes, scales and mins, row 2's at the
    // smallest codes and largest mins: the kernel's integer sums at their bounds.
    BlockQ4_K& big = reinterpret_cast<BlockQ4_K*>(bytes.data() + rb)[0];
    BlockQ4_K& low = reinterpret_cast<BlockQ4_K*>(bytes.data() + 2 * rb)[0];
    const uint8_t top[8] = {63, 63, 63, 63, 63, 63, 63, 63};
    pack_scale_min_k4(top, top, big.scales);
    std::memset(big.qs, 0xff, sizeof(big.qs));
    pack_scale_min_k4(top, top, low.scales);
    std::memset(low.qs, 0, sizeof(low.qs));
  }
  return bytes;
}

// Gaussian tokens, the first two constant (+1 and -1: every activation code at +-127).
std::vector<float> tokens(int64_t n, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(size_t(n * cols));
  for (auto& v : x) v = dist(rng);
  for (int64_t t = 0; t < std::min<int64_t>(n, 2); ++t) std::fill_n(x.begin() + t * cols, cols, t == 0 ? 1.0f : -1.0f);
  return x;
}

std::vector<MatmulPath> paths() {
  std::vector<MatmulPath> p;
  for (MatmulPath path : {MatmulPath::Generic, MatmulPath::Avx2, MatmulPath::Avx512}) {
    if (matmul_path_available(path)) p.push_back(path);
  }
  return p;
}

TEST_P(Regrouped, RegroupingIsLosslessAndKeepsTheSize) {
  std::mt19937 rng(1);
  for (int64_t cols : {block(), 3 * block(), int64_t(2048)}) {
    const int64_t rows = 48;
    const auto bytes = plain_rows(plain(), rows, cols, rng);
    const QMatrix q = make_qmatrix(plain(), rows, cols, bytes.data());
    ASSERT_TRUE(can_regroup(q));
    std::vector<uint8_t> grouped(bytes.size());
    const QMatrix r = regroup(q, grouped.data());
    EXPECT_EQ(r.type, regrouped_type(plain()));
    EXPECT_EQ(plain_type(r.type), plain());
    EXPECT_EQ(r.row_stride, q.row_stride);
    EXPECT_NE(std::memcmp(grouped.data(), bytes.data(), bytes.size()), 0);
    std::vector<uint8_t> back(bytes.size());
    for (int64_t g = 0; g < rows / kR16Rows; ++g) ungroup(r, g, back.data() + size_t(g) * kR16Rows * q.row_stride);
    EXPECT_EQ(back, bytes) << cols << " columns";
  }
}

TEST_P(Regrouped, RefusesWhatItCannotHold) {
  std::mt19937 rng(2);
  const int64_t cols = 2 * block();
  const auto bytes = plain_rows(plain(), 20, cols, rng);
  std::vector<uint8_t> out(bytes.size());
  EXPECT_FALSE(can_regroup(make_qmatrix(plain(), 20, cols, bytes.data())));
  EXPECT_THROW(regroup(make_qmatrix(plain(), 20, cols, bytes.data()), out.data()), Error);
  EXPECT_FALSE(can_regroup(make_qmatrix(GgmlType::F16, 16, cols, bytes.data())));
  EXPECT_FALSE(can_regroup(make_qmatrix(GgmlType::Q5_K, 16, 256, bytes.data())));
  const QMatrix r = regroup(make_qmatrix(plain(), 16, cols, bytes.data()), out.data());
  EXPECT_FALSE(can_regroup(r));
  std::vector<float> row(static_cast<size_t>(cols));
  EXPECT_THROW(dequantize_row(r.type, r.data, row.data(), cols), Error);
  EXPECT_FALSE(parse_type_name(type_name(r.type)).has_value());
}

// Each output against matmul_ref of the plain rows, within the bound of quantizing the
// activations (as in matmul_test), and the reference of the regrouped matrix equal to it.
TEST_P(Regrouped, EveryPathMatchesThePlainReference) {
  std::mt19937 rng(3);
  const std::vector<int64_t> widths =
      block() == 32 ? std::vector<int64_t>{32, 64, 544, 1088} : std::vector<int64_t>{256, 512, 2304};
  for (int64_t cols : widths) {
    const int64_t rows = 48;
    const auto bytes = plain_rows(plain(), rows, cols, rng);
    const QMatrix q = make_qmatrix(plain(), rows, cols, bytes.data());
    std::vector<uint8_t> grouped(bytes.size());
    const QMatrix r = regroup(q, grouped.data());
    std::vector<float> deq(size_t(rows * cols));
    for (int64_t i = 0; i < rows; ++i) dequantize_row(plain(), q.row(i), deq.data() + i * cols, cols);
    for (int64_t nt : {1, 3, 8, 13, 70}) {
      const auto x = tokens(nt, cols, rng);
      std::vector<float> ref(size_t(nt * rows)), ref_r(size_t(nt * rows));
      matmul_ref(q, x.data(), nt, ref.data());
      matmul_ref(r, x.data(), nt, ref_r.data());
      ASSERT_EQ(ref, ref_r);
      PackedActs packed;
      packed.pack(r.type, x.data(), nt, cols, cols);
      for (MatmulPath p : paths()) {
        std::vector<float> y(size_t(nt * rows), NAN);
        matmul_rows_with(p, r, packed, y.data(), rows, 0, rows);
        for (int64_t t = 0; t < nt; ++t) {
          const float* xt = x.data() + t * cols;
          for (int64_t row = 0; row < rows; ++row) {
            double bound = 0, mag = 0;
            for (int64_t b = 0; b < cols / block(); ++b) {
              double amax = 0, wsum = 0;
              for (int64_t i = b * block(); i < (b + 1) * block(); ++i) {
                amax = std::max(amax, double(std::fabs(xt[i])));
                wsum += std::fabs(double(deq[size_t(row * cols + i)]));
                mag += std::fabs(double(deq[size_t(row * cols + i)]) * xt[i]);
              }
              bound += wsum * amax / 127 / 2;
            }
            ASSERT_NEAR(y[size_t(t * rows + row)], ref[size_t(t * rows + row)], bound * 1.0001 + 1e-5 * mag)
                << matmul_path_name(p) << " " << cols << " columns, token " << t << " of " << nt << ", row " << row;
          }
        }
      }
    }
  }
}

// The AVX-512 kernel against the same path's kernel on the plain rows: both sum the same
// integers exactly, so they differ only in the order of their float additions.
TEST_P(Regrouped, Avx512KernelAgreesWithThePlainOneToRounding) {
  if (!matmul_path_available(MatmulPath::Avx512)) GTEST_SKIP() << "no AVX-512 path on this CPU";
  std::mt19937 rng(6);
  for (int64_t cols : {block() * 8, int64_t(2048)}) {
    const int64_t rows = 64, nt = 13;
    const auto bytes = plain_rows(plain(), rows, cols, rng);
    const QMatrix q = make_qmatrix(plain(), rows, cols, bytes.data());
    std::vector<uint8_t> grouped(bytes.size());
    const QMatrix r = regroup(q, grouped.data());
    const auto x = tokens(nt, cols, rng);
    PackedActs packed;
    packed.pack(plain(), x.data(), nt, cols, cols);
    std::vector<float> a(size_t(nt * rows)), b(size_t(nt * rows));
    matmul_rows_with(MatmulPath::Avx512, q, packed, a.data(), rows, 0, rows);
    matmul_rows_with(MatmulPath::Avx512, r, packed, b.data(), rows, 0, rows);
    for (int64_t t = 0; t < nt; ++t) {
      float mag = 0;
      for (int64_t row = 0; row < rows; ++row) mag = std::max(mag, std::fabs(a[size_t(t * rows + row)]));
      for (int64_t row = 0; row < rows; ++row) {
        ASSERT_NEAR(b[size_t(t * rows + row)], a[size_t(t * rows + row)], 1e-5f * mag)
            << cols << " columns, token " << t << ", row " << row;
      }
    }
  }
}

// Without the AVX-512 kernel a path runs its own kernel of the plain type on the
// ungrouped rows: the same bits as on the plain matrix.
TEST_P(Regrouped, OtherPathsEqualTheirPlainKernel) {
  std::mt19937 rng(4);
  const int64_t rows = 32, cols = 2 * block() * 8, nt = 5;
  const auto bytes = plain_rows(plain(), rows, cols, rng);
  const QMatrix q = make_qmatrix(plain(), rows, cols, bytes.data());
  std::vector<uint8_t> grouped(bytes.size());
  const QMatrix r = regroup(q, grouped.data());
  const auto x = tokens(nt, cols, rng);
  PackedActs packed;
  packed.pack(plain(), x.data(), nt, cols, cols);
  for (MatmulPath p : paths()) {
    if (p == MatmulPath::Avx512) continue;
    std::vector<float> a(size_t(nt * rows)), b(size_t(nt * rows));
    matmul_rows_with(p, q, packed, a.data(), rows, 0, rows);
    matmul_rows_with(p, r, packed, b.data(), rows, 3, rows);
    matmul_rows_with(p, r, packed, b.data(), rows, 0, 3);
    EXPECT_EQ(a, b) << matmul_path_name(p);
  }
}

// A token alone equals the same token anywhere in a batch; ranges that cut a group store
// exactly their rows; the pool's split gives the same bits.
TEST_P(Regrouped, BatchesRangesAndThreadsGiveTheSameBits) {
  std::mt19937 rng(5);
  ThreadPool pool(3);
  const int64_t rows = 64, cols = block() == 32 ? 1088 : 1280, nt = 19, ldy = rows + 5;
  const auto bytes = plain_rows(plain(), rows, cols, rng);
  std::vector<uint8_t> grouped(bytes.size());
  const QMatrix r = regroup(make_qmatrix(plain(), rows, cols, bytes.data()), grouped.data());
  const auto x = tokens(nt, cols, rng);
  for (MatmulPath p : paths()) {
    PackedActs batch, one;
    batch.pack(r.type, x.data(), nt, cols, cols);
    std::vector<float> full(static_cast<size_t>(nt * ldy), -7.0f), y1(static_cast<size_t>(rows));
    matmul_rows_with(p, r, batch, full.data(), ldy, 0, rows);
    for (int64_t t = 0; t < nt; ++t) {
      one.pack(r.type, x.data() + t * cols, 1, cols, cols);
      matmul_rows_with(p, r, one, y1.data(), rows, 0, rows);
      for (int64_t row = 0; row < rows; ++row) {
        ASSERT_EQ(y1[size_t(row)], full[size_t(t * ldy + row)])
            << matmul_path_name(p) << " token " << t << " row " << row;
      }
      for (int64_t row = rows; row < ldy; ++row) ASSERT_EQ(full[size_t(t * ldy + row)], -7.0f);
    }
    for (auto [r0, r1] : {std::pair<int64_t, int64_t>{5, 11}, {5, 37}, {16, 32}, {30, 64}}) {
      std::vector<float> part(size_t(nt * ldy), -7.0f);
      matmul_rows_with(p, r, batch, part.data(), ldy, r0, r1);
      for (int64_t t = 0; t < nt; ++t) {
        for (int64_t row = 0; row < ldy; ++row) {
          const float want = row >= r0 && row < r1 ? full[size_t(t * ldy + row)] : -7.0f;
          ASSERT_EQ(part[size_t(t * ldy + row)], want) << matmul_path_name(p) << " rows [" << r0 << ", " << r1 << ")";
        }
      }
    }
  }
  std::vector<float> threaded(size_t(nt * rows)), serial(size_t(nt * rows));
  matmul(r, x.data(), nt, threaded.data(), pool);
  PackedActs packed;
  packed.pack(r.type, x.data(), nt, cols, cols);
  matmul_rows(r, packed, serial.data(), rows, 0, rows);
  EXPECT_EQ(threaded, serial);
}

INSTANTIATE_TEST_SUITE_P(Types, Regrouped, testing::Values(GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_0),
                         [](const testing::TestParamInfo<GgmlType>& info) {
                           return std::string(type_name(info.param));
                         });

}  // namespace
}  // namespace moe
