// KV row formats: their byte layouts, how close a stored row comes back, and every decoder
// this CPU runs against the plain one, bit for bit.
#include "kernels/kv_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"

namespace moe {
namespace {

constexpr KvDtype kDtypes[] = {KvDtype::f32, KvDtype::f16, KvDtype::bf16, KvDtype::fp8_e4m3, KvDtype::q8_0};

std::vector<float> random_row(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> row(static_cast<size_t>(n));
  for (float& x : row) x = d(rng);
  return row;
}

TEST(KvFormat, NamesParseBack) {
  for (const KvDtype d : kDtypes) EXPECT_EQ(parse_kv_dtype(kv_dtype_name(d)), d);
  EXPECT_EQ(parse_kv_dtype("auto"), kKvDtypeAuto);
  EXPECT_EQ(parse_kv_dtype("fp8"), KvDtype::fp8_e4m3);
  EXPECT_FALSE(parse_kv_dtype("int4").has_value());
  EXPECT_FALSE(parse_kv_dtype("F16").has_value());
}

TEST(KvFormat, RowBytesOfDeepSeekAndQwenRows) {
  // DeepSeek-V3's MLA row: latent 512 + rope 64.
  EXPECT_EQ(KvRowFormat(KvDtype::f32, {512, 64}).bytes(), 2304);
  EXPECT_EQ(KvRowFormat(KvDtype::f16, {512, 64}).bytes(), 1152);
  EXPECT_EQ(KvRowFormat(KvDtype::bf16, {512, 64}).bytes(), 1152);
  EXPECT_EQ(KvRowFormat(KvDtype::fp8_e4m3, {512, 64}).bytes(), 4 + 512 + 4 + 64);
  EXPECT_EQ(KvRowFormat(KvDtype::q8_0, {512, 64}).bytes(), 18 * 34);
  // Qwen3-235B's GQA row: 4 keys and 4 values of 128.
  const std::vector<int64_t> gqa(8, 128);
  EXPECT_EQ(KvRowFormat(KvDtype::fp8_e4m3, gqa).bytes(), 8 * (4 + 128));
  EXPECT_EQ(KvRowFormat(KvDtype::q8_0, gqa).bytes(), 32 * 34);
  // A segment that is not a multiple of 32 ends with a short q8_0 block.
  EXPECT_EQ(KvRowFormat(KvDtype::q8_0, {40}).bytes(), 34 + 2 + 8);
  EXPECT_THROW(KvRowFormat(KvDtype::f16, {}), Error);
  EXPECT_THROW(KvRowFormat(KvDtype::f16, {16, 0}), Error);
}

TEST(KvFormat, GroupsAndByteOffsets) {
  const KvRowFormat q8(KvDtype::q8_0, {40, 64});
  EXPECT_TRUE(q8.whole_groups(0, 40));
  EXPECT_TRUE(q8.whole_groups(40, 64));
  EXPECT_TRUE(q8.whole_groups(32, 8));
  EXPECT_TRUE(q8.whole_groups(0, 104));
  EXPECT_FALSE(q8.whole_groups(0, 16));
  EXPECT_FALSE(q8.whole_groups(8, 32));
  EXPECT_FALSE(q8.whole_groups(40, 65));
  EXPECT_EQ(q8.byte_at(0), 0);
  EXPECT_EQ(q8.byte_at(32), 34);
  EXPECT_EQ(q8.byte_at(40), 34 + 10);
  EXPECT_EQ(q8.byte_at(72), 34 + 10 + 34);
  EXPECT_EQ(q8.byte_at(104), q8.bytes());
  const KvRowFormat fp8(KvDtype::fp8_e4m3, {512, 64});
  EXPECT_TRUE(fp8.whole_groups(0, 576));
  EXPECT_FALSE(fp8.whole_groups(0, 256));
  EXPECT_EQ(fp8.byte_at(512), 516);
  const KvRowFormat bf(KvDtype::bf16, {512, 64});
  EXPECT_TRUE(bf.whole_groups(3, 100));
  EXPECT_EQ(bf.byte_at(100), 200);
}

// How far a stored value may be from what was written, for a value x in a group whose
// largest magnitude is amax.
double allowed_error(KvDtype d, double x, double amax) {
  switch (d) {
    case KvDtype::f32:
      return 0.0;
    case KvDtype::f16:
      return std::fabs(x) * 0x1p-11 + 0x1p-25;
    case KvDtype::bf16:
      return std::fabs(x) * 0x1p-8;
    case KvDtype::fp8_e4m3:  // 3 mantissa bits, subnormals below 2^-6 of 448 scale units
      return std::fabs(x) * 0x1p-4 + amax / 448.0 * 0x1p-10;
    case KvDtype::q8_0: {  // half a step, and the step's own f16 rounding (subnormal below 2^-14) times 127 steps
      const double d = amax / 127.0;
      return (d * 0.5 + 127.0 * std::max(d * 0x1p-11, 0x1p-25)) * 1.0001;
    }
  }
  return 0.0;
}

TEST(KvFormat, StoredRowsComeBackWithinTheDtypesPrecision) {
  std::mt19937 rng(5);
  const std::vector<int64_t> segments{512, 64, 40, 7};
  for (const KvDtype d : kDtypes) {
    const KvRowFormat f(d, segments);
    for (const float scale : {1.0f, 1e-3f, 300.0f}) {
      std::vector<float> row = random_row(f.floats(), rng, scale);
      row[3] = 0.0f;
      std::vector<uint8_t> stored(size_t(f.bytes()));
      f.encode(row.data(), stored.data());
      std::vector<float> back(row.size());
      f.decode_ref(stored.data(), 0, f.floats(), back.data());
      int64_t at = 0;
      for (const int64_t n : segments) {
        for (int64_t b = 0; b < n; b += 32) {  // q8_0 groups; the others' groups only widen amax
          const int64_t len = std::min<int64_t>(32, n - b);
          double amax = 0.0;
          const int64_t lo = d == KvDtype::q8_0 ? at + b : at, hi = d == KvDtype::q8_0 ? at + b + len : at + n;
          for (int64_t i = lo; i < hi; ++i) amax = std::max(amax, double(std::fabs(row[size_t(i)])));
          for (int64_t i = at + b; i < at + b + len; ++i) {
            ASSERT_LE(std::fabs(double(back[size_t(i)]) - double(row[size_t(i)])), allowed_error(d, row[size_t(i)], amax))
                << kv_dtype_name(d) << " scale " << scale << " at " << i << ": " << row[size_t(i)] << " came back as "
                << back[size_t(i)];
          }
        }
        at += n;
      }
      EXPECT_EQ(back[3], 0.0f) << kv_dtype_name(d);
    }
  }
}

TEST(KvFormat, AZeroGroupStaysZero) {
  for (const KvDtype d : kDtypes) {
    const KvRowFormat f(d, {32, 32});
    std::vector<float> row(64, 0.0f);
    for (int i = 32; i < 64; ++i) row[size_t(i)] = float(i);
    std::vector<uint8_t> stored(size_t(f.bytes()));
    f.encode(row.data(), stored.data());
    std::vector<float> back(64, 1.0f);
    f.decode(stored.data(), 0, 64, back.data());
    for (int i = 0; i < 32; ++i) ASSERT_EQ(back[size_t(i)], 0.0f) << kv_dtype_name(d);
    EXPECT_NEAR(back[63], 63.0f, 0.5f) << kv_dtype_name(d);
  }
}

TEST(KvFormat, Q8BlocksAreLlamaCppsBlockQ8_0) {
  const KvRowFormat f(KvDtype::q8_0, {32});
  std::vector<float> row(32);
  for (int i = 0; i < 32; ++i) row[size_t(i)] = float(i - 16) * 0.25f;  // largest magnitude 4.0
  std::vector<uint8_t> stored(34);
  f.encode(row.data(), stored.data());
  uint16_t d;
  std::memcpy(&d, stored.data(), 2);
  EXPECT_EQ(d, f32_to_fp16(4.0f / 127.0f));
  EXPECT_EQ(int8_t(stored[2]), -127);  // -4.0
  EXPECT_EQ(int8_t(stored[2 + 16]), 0);
  EXPECT_EQ(int8_t(stored[2 + 20]), 32);  // 1.0 / (4 / 127) = 31.75
}

TEST(KvFormat, FastDecodersEqualThePlainOneBitForBit) {
  std::mt19937 rng(11);
  // Segments that end inside a vector, and a range that starts past the row's start.
  const std::vector<int64_t> segments{512, 64, 40, 7, 128, 19};
  for (const KvDtype d : kDtypes) {
    const KvRowFormat f(d, segments);
    std::vector<float> row = random_row(f.floats(), rng, 2.0f);
    row[1] = 1e-6f;  // fp8 subnormals
    row[2] = -1e-7f;
    std::vector<uint8_t> stored(size_t(f.bytes()));
    f.encode(row.data(), stored.data());
    std::vector<float> ref(row.size()), got(row.size() + 1);
    for (auto [begin, n] : {std::pair<int64_t, int64_t>{0, f.floats()}, {512, 64}, {576, 47}, {623, 147}}) {
      ASSERT_TRUE(f.whole_groups(begin, n));
      f.decode_ref(stored.data(), begin, n, ref.data());
      for (const char* name : KvRowFormat::decoders_here()) {
        std::fill(got.begin(), got.end(), -1.0f);
        f.decode_with(name, stored.data(), begin, n, got.data());
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(std::memcmp(&got[size_t(i)], &ref[size_t(i)], 4), 0)
              << kv_dtype_name(d) << " " << name << " float " << begin + i << ": " << got[size_t(i)] << " vs " << ref[size_t(i)];
        }
        EXPECT_EQ(got[size_t(n)], -1.0f) << kv_dtype_name(d) << " " << name << " wrote past the range " << begin << "+" << n;
      }
    }
  }
}

TEST(KvFormat, EveryFp8CodeDecodesAsThePlainTable) {
  // One segment holding every code (but NaN's): the fp8 decoders agree on all of them.
  const KvRowFormat f(KvDtype::fp8_e4m3, {254});
  std::vector<uint8_t> stored(size_t(f.bytes()));
  const float scale = 0.37f;
  std::memcpy(stored.data(), &scale, 4);
  int64_t i = 0;
  for (int c = 0; c < 256; ++c)
    if ((c & 0x7F) != 0x7F) stored[size_t(4 + i++)] = uint8_t(c);
  std::vector<float> ref(254), got(254);
  f.decode_ref(stored.data(), 0, 254, ref.data());
  for (const char* name : KvRowFormat::decoders_here()) {
    f.decode_with(name, stored.data(), 0, 254, got.data());
    EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * 4), 0) << name;
  }
}

}  // namespace
}  // namespace moe
