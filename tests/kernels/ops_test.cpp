// RMSNorm, SwiGLU, softmax, top-k and RoPE: the optimized paths against their reference
// twins, and RoPE against its formulas written out here in double.
#include "kernels/ops.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"

namespace moe {
namespace {

const int64_t kSizes[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 100, 1000, 4097, 7168};

std::vector<float> random_vec(std::mt19937& rng, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float rel,
                  float abs, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], abs + rel * std::fabs(want[i])) << what << " at " << i;
  }
}

TEST(RmsNorm, MatchesReference) {
  std::mt19937 rng(1);
  for (int64_t n : kSizes) {
    const auto x = random_vec(rng, n, -3.0f, 3.0f);
    const auto w = random_vec(rng, n, 0.5f, 1.5f);
    for (const float* wp : {w.data(), static_cast<const float*>(nullptr)}) {
      std::vector<float> y(static_cast<size_t>(n)), ref(static_cast<size_t>(n));
      rms_norm(x.data(), wp, y.data(), n, 1e-6f);
      rms_norm_ref(x.data(), wp, ref.data(), n, 1e-6f);
      expect_close(y, ref, 2e-6f, 1e-7f, "n=" + std::to_string(n));
      std::vector<float> in_place = x;  // x and y may alias
      rms_norm(in_place.data(), wp, in_place.data(), n, 1e-6f);
      EXPECT_EQ(in_place, y);
    }
  }
}

TEST(RmsNorm, EpsDominatesTinyInput) {
  const std::vector<float> x = {1e-20f, -1e-20f, 0.0f};
  std::vector<float> y(3);
  rms_norm(x.data(), nullptr, y.data(), 3, 1e-4f);
  EXPECT_NEAR(y[0], 1e-18f, 1e-22f);  // 1e-20 / sqrt(1e-4)
  EXPECT_EQ(y[2], 0.0f);
}

TEST(Swiglu, MatchesReference) {
  std::mt19937 rng(2);
  for (int64_t n : kSizes) {
    auto g = random_vec(rng, n, -30.0f, 30.0f);
    const auto u = random_vec(rng, n, -2.0f, 2.0f);
    // Extremes where e^-g overflows or underflows.
    const float extremes[] = {-120.0f, -89.0f, -88.7f, 87.0f, 95.0f, 0.0f, -1e-8f};
    for (size_t i = 0; i < std::size(extremes) && i < g.size(); ++i) g[i] = extremes[i];
    std::vector<float> y(static_cast<size_t>(n)), ref(static_cast<size_t>(n));
    swiglu(g.data(), u.data(), y.data(), n);
    swiglu_ref(g.data(), u.data(), ref.data(), n);
    expect_close(y, ref, 2e-6f, 1e-30f, "n=" + std::to_string(n));
  }
}

TEST(Softmax, MatchesReference) {
  std::mt19937 rng(3);
  for (int64_t n : kSizes) {
    for (float range : {1.0f, 30.0f, 300.0f}) {
      auto x = random_vec(rng, n, -range, range);
      auto ref = x;
      softmax(x.data(), n);
      softmax_ref(ref.data(), n);
      expect_close(x, ref, 2e-6f, 1e-12f,
                   "n=" + std::to_string(n) + " range=" + std::to_string(range));
      double sum = 0.0;
      for (float v : x) sum += v;
      EXPECT_NEAR(sum, 1.0, 1e-5);
    }
  }
}

TEST(Softmax, MaskedEntriesAreExactlyZero) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0f, -inf, 1.0f, -inf, -inf, 2.0f, -inf, -inf, -inf, 0.5f};
  softmax(x.data(), int64_t(x.size()));
  for (size_t i : {1, 3, 4, 6, 7, 8}) EXPECT_EQ(x[i], 0.0f) << i;
  const double z = 1.0 + std::exp(1.0) + std::exp(2.0) + std::exp(0.5);
  EXPECT_NEAR(x[5], std::exp(2.0) / z, 1e-6);
}

TEST(TopK, MatchesReferenceWithTies) {
  std::mt19937 rng(4);
  for (int64_t n : {1, 5, 8, 64, 160, 256, 1000}) {
    for (int k : {1, 2, 6, 8, 32, 33, 64, 300}) {
      if (k > n) continue;
      // Few distinct values: many ties, which must keep the lower index first.
      std::uniform_int_distribution<int> dist(-5, 5);
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = float(dist(rng)) * 0.25f;
      std::vector<int32_t> got(static_cast<size_t>(k)), want(static_cast<size_t>(k));
      top_k(x.data(), n, k, got.data());
      top_k_ref(x.data(), n, k, want.data());
      EXPECT_EQ(got, want) << "n=" << n << " k=" << k;
      // Distinct values too.
      x = random_vec(rng, n, -1.0f, 1.0f);
      top_k(x.data(), n, k, got.data());
      top_k_ref(x.data(), n, k, want.data());
      EXPECT_EQ(got, want) << "distinct n=" << n << " k=" << k;
    }
  }
}

TEST(TopK, HandPicked) {
  const std::vector<float> x = {1.0f, 3.0f, 3.0f, 2.0f, -1.0f, 3.0f};
  std::vector<int32_t> idx(4);
  top_k(x.data(), 6, 4, idx.data());
  EXPECT_EQ(idx, (std::vector<int32_t>{1, 2, 5, 3}));
  EXPECT_THROW(top_k(x.data(), 6, 7, idx.data()), Error);
}

// ---- RoPE ----

// The YaRN angle of pair i at `pos` and its magnitude, from the published formulas in
// double (theta_scale^i by pow, not ggml's repeated float product).
struct Expected {
  double theta, mscale;
};
Expected expected_angle(const RopeParams& p, double pos, int i, double low, double high) {
  const double extrap = pos * std::pow(double(p.freq_base), -2.0 * i / p.n_rot);
  const double interp = double(p.freq_scale) * extrap;
  double theta = interp, mscale = p.attn_factor;
  if (p.ext_factor != 0.0f) {
    const double y = (i - low) / std::max(0.001, high - low);
    const double mix = (1.0 - std::min(1.0, std::max(0.0, y))) * p.ext_factor;
    theta = interp * (1.0 - mix) + extrap * mix;
    mscale *= 1.0 + 0.1 * std::log(1.0 / p.freq_scale);
  }
  return {theta, mscale};
}

// ggml advances the angle in float (about one rounding per pair) and evaluates cosf of a
// float angle; the bound follows from that.
double angle_tolerance(double theta, int i) { return std::fabs(theta) * (i + 4) * 6e-8 + 2e-6; }

void expect_table_matches(const RopeParams& p, int32_t pos, double low, double high) {
  std::vector<float> cs(size_t(p.n_rot));
  rope_table_ref(p, pos, cs.data());
  for (int i = 0; i < p.n_rot / 2; ++i) {
    const Expected e = expected_angle(p, pos, i, low, high);
    const double tol = angle_tolerance(e.theta, i) * e.mscale;
    EXPECT_NEAR(cs[size_t(2 * i)], std::cos(e.theta) * e.mscale, tol)
        << "pos " << pos << " pair " << i;
    EXPECT_NEAR(cs[size_t(2 * i + 1)], std::sin(e.theta) * e.mscale, tol)
        << "pos " << pos << " pair " << i;
  }
}

TEST(Rope, PlainFormulaWithoutYarn) {
  // Qwen3-style: theta_i = pos * base^(-2i / n_rot), no magnitude change. The YaRN-only
  // inputs must not matter when ext_factor is 0.
  RopeParams p;
  p.n_rot = 128;
  p.freq_base = 1000000.0f;
  for (int n_ctx : {0, 4096}) {
    p.n_ctx_orig = n_ctx;
    for (int32_t pos : {0, 1, 2, 17, 1000, 40000}) {
      std::vector<float> cs(size_t(p.n_rot));
      rope_table_ref(p, pos, cs.data());
      for (int i = 0; i < p.n_rot / 2; ++i) {
        const double theta = pos * std::pow(1e6, -2.0 * i / 128.0);
        const double tol = angle_tolerance(theta, i);
        ASSERT_NEAR(cs[size_t(2 * i)], std::cos(theta), tol) << pos << " " << i;
        ASSERT_NEAR(cs[size_t(2 * i + 1)], std::sin(theta), tol) << pos << " " << i;
      }
    }
  }
}

TEST(Rope, HandComputedSmallTable) {
  // n_rot 4, base 100: theta_0 = pos, theta_1 = pos / 10.
  RopeParams p;
  p.n_rot = 4;
  p.freq_base = 100.0f;
  p.attn_factor = 0.5f;  // scales cos and sin even without YaRN
  std::vector<float> cs(4);
  rope_table_ref(p, 3, cs.data());
  EXPECT_NEAR(cs[0], 0.5 * std::cos(3.0), 1e-6);
  EXPECT_NEAR(cs[1], 0.5 * std::sin(3.0), 1e-6);
  EXPECT_NEAR(cs[2], 0.5 * std::cos(0.3), 1e-6);
  EXPECT_NEAR(cs[3], 0.5 * std::sin(0.3), 1e-6);
}

RopeParams deepseek_yarn() {
  // DeepSeek-V2/V3's rope: 64 rotated dims, factor 40 over a 4096 original context.
  RopeParams p;
  p.n_rot = 64;
  p.freq_base = 10000.0f;
  p.freq_scale = 1.0f / 40.0f;
  p.n_ctx_orig = 4096;
  p.ext_factor = 1.0f;
  p.attn_factor = 1.0f;
  p.beta_fast = 32.0f;
  p.beta_slow = 1.0f;
  return p;
}

TEST(Rope, YarnCorrectionDims) {
  // low = floor(64 ln(4096 / (32 * 2 pi)) / (2 ln 10000)) = floor(10.47) = 10
  // high = ceil(64 ln(4096 / (1 * 2 pi)) / (2 ln 10000)) = ceil(22.51) = 23
  float dims[2];
  rope_yarn_corr_dims(deepseek_yarn(), dims);
  EXPECT_EQ(dims[0], 10.0f);
  EXPECT_EQ(dims[1], 23.0f);
  // Clamped to [0, n_rot - 1].
  RopeParams p = deepseek_yarn();
  p.n_rot = 8;
  p.n_ctx_orig = 1 << 30;
  p.beta_fast = 1e9f;
  rope_yarn_corr_dims(p, dims);
  EXPECT_EQ(dims[0], 0.0f);
  EXPECT_EQ(dims[1], 7.0f);
}

TEST(Rope, HandComputedWithYarn) {
  const RopeParams p = deepseek_yarn();
  // Pair 0 is below the ramp (pure extrapolation), pair 31 above it (pure interpolation),
  // both scaled by mscale = 1 + 0.1 ln 40.
  const double mscale = 1.0 + 0.1 * std::log(40.0);
  std::vector<float> cs(64);
  rope_table_ref(p, 5, cs.data());
  EXPECT_NEAR(cs[0], std::cos(5.0) * mscale, 2e-6);
  EXPECT_NEAR(cs[1], std::sin(5.0) * mscale, 2e-6);
  const double th31 = 5.0 / 40.0 * std::pow(10000.0, -62.0 / 64.0);
  EXPECT_NEAR(cs[62], std::cos(th31) * mscale, 2e-6);
  EXPECT_NEAR(cs[63], std::sin(th31) * mscale, 2e-6);
  // Pair 15 sits on the ramp: y = (15 - 10) / 13, mix = 1 - y.
  const double extrap = 5.0 * std::pow(10000.0, -30.0 / 64.0);
  const double mix = 1.0 - 5.0 / 13.0;
  const double th15 = extrap / 40.0 * (1.0 - mix) + extrap * mix;
  EXPECT_NEAR(cs[30], std::cos(th15) * mscale, 2e-6);
  EXPECT_NEAR(cs[31], std::sin(th15) * mscale, 2e-6);

  for (int32_t pos : {0, 1, 5, 999, 4096, 100000}) expect_table_matches(p, pos, 10.0, 23.0);
}

TEST(Rope, FreqFactorsDivideTheAngle) {
  RopeParams p;
  p.n_rot = 8;
  p.freq_base = 500000.0f;
  const std::vector<float> ff = {1.0f, 2.0f, 4.0f, 8.0f};
  p.freq_factors = ff.data();
  std::vector<float> cs(8);
  rope_table_ref(p, 7, cs.data());
  for (int i = 0; i < 4; ++i) {
    const double theta = 7.0 * std::pow(500000.0, -2.0 * i / 8.0) / ff[size_t(i)];
    EXPECT_NEAR(cs[size_t(2 * i)], std::cos(theta), 2e-6) << i;
    EXPECT_NEAR(cs[size_t(2 * i + 1)], std::sin(theta), 2e-6) << i;
  }
}

TEST(Rope, TableEqualsPerPositionReference) {
  RopeParams variants[3] = {deepseek_yarn(), RopeParams{}, RopeParams{}};
  variants[1].n_rot = 128;
  variants[1].freq_base = 1e6f;
  variants[2].n_rot = 6;
  variants[2].freq_scale = 0.25f;
  variants[2].attn_factor = 0.7f;
  const std::vector<int32_t> positions = {0, 1, 2, 3, 77, 4095, 4096, 65536, 163839};
  for (const RopeParams& p : variants) {
    RopeTable table;
    table.build(p, positions.data(), int64_t(positions.size()));
    ASSERT_EQ(table.pairs(), p.n_rot / 2);
    std::vector<float> ref(size_t(p.n_rot));
    for (size_t t = 0; t < positions.size(); ++t) {
      rope_table_ref(p, positions[t], ref.data());
      for (int i = 0; i < p.n_rot; ++i) ASSERT_EQ(table.cos_sin(int64_t(t))[i], ref[size_t(i)]);
    }
  }
  RopeParams odd;
  odd.n_rot = 7;
  RopeTable table;
  EXPECT_THROW(table.build(odd, positions.data(), 1), Error);
}

TEST(Rope, ApplyByHand) {
  // A quarter turn: cos 0, sin 1 for both pairs.
  const float cs[4] = {0.0f, 1.0f, 0.0f, 1.0f};
  std::vector<float> x = {1, 2, 3, 4, 9};
  apply_rope(x.data(), 1, 5, cs, 4, RopeStyle::Interleaved);  // pairs (1,2), (3,4)
  EXPECT_EQ(x, (std::vector<float>{-2, 1, -4, 3, 9}));
  x = {1, 2, 3, 4, 9};
  apply_rope(x.data(), 1, 5, cs, 4, RopeStyle::Neox);  // pairs (1,3), (2,4)
  EXPECT_EQ(x, (std::vector<float>{-3, -4, 1, 2, 9}));
}

TEST(Rope, ApplyMatchesReference) {
  std::mt19937 rng(5);
  for (RopeStyle style : {RopeStyle::Interleaved, RopeStyle::Neox}) {
    for (int n_rot : {2, 6, 8, 16, 30, 32, 64, 128}) {
      for (int extra : {0, 3, 64}) {
        const int64_t head_dim = n_rot + extra, stride = head_dim + 5, n_heads = 5;
        RopeParams p = deepseek_yarn();
        p.n_rot = n_rot;
        std::vector<float> cs(static_cast<size_t>(n_rot));
        rope_table_ref(p, 1234, cs.data());
        const auto x = random_vec(rng, n_heads * stride, -2.0f, 2.0f);
        auto got = x, want = x;
        apply_rope(got.data(), n_heads, stride, cs.data(), n_rot, style);
        apply_rope_ref(want.data(), n_heads, stride, cs.data(), n_rot, style);
        expect_close(got, want, 1e-6f, 1e-6f, "n_rot=" + std::to_string(n_rot));
        for (int64_t h = 0; h < n_heads; ++h)  // dims past n_rot and the padding are untouched
          for (int64_t d = n_rot; d < stride; ++d)
            ASSERT_EQ(got[size_t(h * stride + d)], x[size_t(h * stride + d)]);
      }
    }
  }
}

// ---- the portable path ----

std::string self_path() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

TEST(Backends, GenericPathPassesTheSameTests) {
  // The backend is fixed per process, so the portable path is checked by running this
  // binary again with MOENGINE_CPU=generic.
  if (const char* cap = std::getenv("MOENGINE_CPU")) {
    if (std::string(cap) == "generic") {
      EXPECT_STREQ(ops_backend_name(), "generic");
    }
    GTEST_SKIP() << "MOENGINE_CPU=" << cap;
  }
  if (std::string(ops_backend_name()) == "generic") GTEST_SKIP() << "no faster path on this CPU";
  const std::string exe = self_path();
  ASSERT_FALSE(exe.empty());
  const std::string cmd = "MOENGINE_CPU=generic '" + exe + "' --gtest_brief=1";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
}

}  // namespace
}  // namespace moe
