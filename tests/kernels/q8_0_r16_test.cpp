// q8_0 weights regrouped 16 rows at a time (q8_0_r16): the regrouping is lossless, and
// every path computes from them what it computes from the q8_0 rows (the AVX-512 kernel
// within the activation-quantization bound of the reference, the others through the
// q8_0 kernels exactly), over row ranges that cut groups, token tiles and their tails.
#include "kernels/q8_0_r16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/quant.h"

namespace moe {
namespace {

std::vector<uint8_t> q8_0_rows(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> f(size_t(rows * cols));
  for (auto& v : f) v = dist(rng);
  const size_t rb = row_bytes(GgmlType::Q8_0, cols);
  std::vector<uint8_t> bytes(rb * size_t(rows));
  for (int64_t r = 0; r < rows; ++r) quantize_row(GgmlType::Q8_0, f.data() + r * cols, bytes.data() + size_t(r) * rb, cols);
  // The extreme codes, which the +128 offset maps to 0 and 255.
  reinterpret_cast<BlockQ8_0*>(bytes.data())[0].qs[0] = -128;
  reinterpret_cast<BlockQ8_0*>(bytes.data())[0].qs[1] = 127;
  return bytes;
}

std::vector<float> gaussian(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(rng);
  return x;
}

std::vector<MatmulPath> paths() {
  std::vector<MatmulPath> p;
  for (MatmulPath path : {MatmulPath::Generic, MatmulPath::Avx2, MatmulPath::Avx512}) {
    if (matmul_path_available(path)) p.push_back(path);
  }
  return p;
}

TEST(Q8_0R16, RegroupingIsLosslessAndKeepsTheSize) {
  std::mt19937 rng(1);
  for (int64_t cols : {32, 96, 2048}) {
    const int64_t rows = 48;
    const auto bytes = q8_0_rows(rows, cols, rng);
    const QMatrix q = make_qmatrix(GgmlType::Q8_0, rows, cols, bytes.data());
    ASSERT_TRUE(can_regroup_q8_0(q));
    std::vector<uint8_t> grouped(bytes.size());
    const QMatrix r = regroup_q8_0_r16(q, grouped.data());
    EXPECT_EQ(r.type, GgmlType::Q8_0_R16);
    EXPECT_EQ(r.row_stride, q.row_stride);
    EXPECT_NE(std::memcmp(grouped.data(), bytes.data(), bytes.size()), 0);
    std::vector<uint8_t> back(bytes.size());
    for (int64_t g = 0; g < rows / kR16Rows; ++g) {
      ungroup_q8_0_r16(r, g, reinterpret_cast<BlockQ8_0*>(back.data() + size_t(g) * kR16Rows * q.row_stride));
    }
    EXPECT_EQ(back, bytes) << cols << " columns";
  }
}

TEST(Q8_0R16, RefusesWhatItCannotHold) {
  std::mt19937 rng(2);
  const auto bytes = q8_0_rows(20, 64, rng);
  std::vector<uint8_t> out(bytes.size());
  EXPECT_FALSE(can_regroup_q8_0(make_qmatrix(GgmlType::Q8_0, 20, 64, bytes.data())));
  EXPECT_THROW(regroup_q8_0_r16(make_qmatrix(GgmlType::Q8_0, 20, 64, bytes.data()), out.data()), Error);
  EXPECT_FALSE(can_regroup_q8_0(make_qmatrix(GgmlType::F16, 16, 64, bytes.data())));
  const QMatrix r = regroup_q8_0_r16(make_qmatrix(GgmlType::Q8_0, 16, 64, bytes.data()), out.data());
  float row[64];
  EXPECT_THROW(dequantize_row(GgmlType::Q8_0_R16, r.data, row, 64), Error);
  EXPECT_FALSE(parse_type_name("q8_0_r16").has_value());
}

// Each output against matmul_ref of the q8_0 rows, within the bound of quantizing the
// activations (as in matmul_test), and the reference of the regrouped matrix equal to it.
TEST(Q8_0R16, EveryPathMatchesTheQ8_0Reference) {
  std::mt19937 rng(3);
  for (int64_t cols : {32, 64, 544, 1088}) {
    const int64_t rows = 48;
    const auto bytes = q8_0_rows(rows, cols, rng);
    const QMatrix q = make_qmatrix(GgmlType::Q8_0, rows, cols, bytes.data());
    std::vector<uint8_t> grouped(bytes.size());
    const QMatrix r = regroup_q8_0_r16(q, grouped.data());
    std::vector<float> deq(size_t(rows * cols));
    for (int64_t i = 0; i < rows; ++i) dequantize_row(GgmlType::Q8_0, q.row(i), deq.data() + i * cols, cols);
    for (int64_t nt : {1, 3, 8, 13, 70}) {
      const auto x = gaussian(size_t(nt * cols), rng);
      std::vector<float> ref(size_t(nt * rows)), ref_r(size_t(nt * rows));
      matmul_ref(q, x.data(), nt, ref.data());
      matmul_ref(r, x.data(), nt, ref_r.data());
      ASSERT_EQ(ref, ref_r);
      PackedActs packed;
      packed.pack(GgmlType::Q8_0_R16, x.data(), nt, cols, cols);
      for (MatmulPath p : paths()) {
        std::vector<float> y(size_t(nt * rows), NAN);
        matmul_rows_with(p, r, packed, y.data(), rows, 0, rows);
        for (int64_t t = 0; t < nt; ++t) {
          const float* xt = x.data() + t * cols;
          for (int64_t row = 0; row < rows; ++row) {
            double bound = 0, mag = 0;
            for (int64_t b = 0; b < cols / 32; ++b) {
              double amax = 0, wsum = 0;
              for (int64_t i = b * 32; i < b * 32 + 32; ++i) {
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

// Without the AVX-512 kernel a path runs its own q8_0 kernel on the ungrouped rows: the
// same bits as on the q8_0 matrix.
TEST(Q8_0R16, OtherPathsEqualTheirQ8_0Kernel) {
  std::mt19937 rng(4);
  const int64_t rows = 32, cols = 544, nt = 5;
  const auto bytes = q8_0_rows(rows, cols, rng);
  const QMatrix q = make_qmatrix(GgmlType::Q8_0, rows, cols, bytes.data());
  std::vector<uint8_t> grouped(bytes.size());
  const QMatrix r = regroup_q8_0_r16(q, grouped.data());
  const auto x = gaussian(size_t(nt * cols), rng);
  PackedActs packed;
  packed.pack(GgmlType::Q8_0, x.data(), nt, cols, cols);
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
TEST(Q8_0R16, BatchesRangesAndThreadsGiveTheSameBits) {
  std::mt19937 rng(5);
  ThreadPool pool(3);
  const int64_t rows = 64, cols = 1088, nt = 19, ldy = rows + 5;
  const auto bytes = q8_0_rows(rows, cols, rng);
  std::vector<uint8_t> grouped(bytes.size());
  const QMatrix r = regroup_q8_0_r16(make_qmatrix(GgmlType::Q8_0, rows, cols, bytes.data()), grouped.data());
  const auto x = gaussian(size_t(nt * cols), rng);
  for (MatmulPath p : paths()) {
    PackedActs batch, one;
    batch.pack(GgmlType::Q8_0_R16, x.data(), nt, cols, cols);
    std::vector<float> full(static_cast<size_t>(nt * ldy), -7.0f), y1(static_cast<size_t>(rows));
    matmul_rows_with(p, r, batch, full.data(), ldy, 0, rows);
    for (int64_t t = 0; t < nt; ++t) {
      one.pack(GgmlType::Q8_0_R16, x.data() + t * cols, 1, cols, cols);
      matmul_rows_with(p, r, one, y1.data(), rows, 0, rows);
      for (int64_t row = 0; row < rows; ++row) {
        ASSERT_EQ(y1[size_t(row)], full[size_t(t * ldy + row)]) << matmul_path_name(p) << " token " << t << " row " << row;
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
  packed.pack(GgmlType::Q8_0_R16, x.data(), nt, cols, cols);
  matmul_rows(r, packed, serial.data(), rows, 0, rows);
  EXPECT_EQ(threaded, serial);
}

}  // namespace
}  // namespace moe
