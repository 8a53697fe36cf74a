// The optimized forward pass against the independent f32 reference (tests/support), and
// batched prefill against token-by-token decode, on tiny generated models of every
// supported architecture and variant.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/thread_pool.h"
#include "engine/single_sequence.h"
#include "kernels/regrouped.h"
#include "support/reference_model.h"
#include "test_models.h"

namespace moe {
namespace {

struct Variant {
  const char* name;
  GenSpec spec;
};

GenSpec tiny(Arch arch) { return gen_preset(arch, "tiny"); }

std::vector<Variant> variants() {
  std::vector<Variant> v;
  v.push_back({"deepseek_v3", tiny(Arch::Deepseek2)});
  GenSpec yarn = tiny(Arch::Deepseek2);
  yarn.yarn_factor = 4.0f;
  v.push_back({"deepseek_v3_yarn", yarn});
  GenSpec lite = tiny(Arch::Deepseek2);
  lite.q_lora_rank = 0;
  lite.v3_gating = false;
  lite.mla_split = false;
  v.push_back({"deepseek_v2_lite_combined_kv_b", lite});
  GenSpec v2 = tiny(Arch::Deepseek2);
  v2.v3_gating = false;
  v2.n_shared_experts = 2;
  v.push_back({"deepseek_v2_softmax", v2});
  v.push_back({"qwen3moe", tiny(Arch::Qwen3Moe)});
  return v;
}

std::vector<int32_t> test_tokens(int n, int64_t n_vocab) {
  std::vector<int32_t> t;
  uint32_t s = 12345;
  for (int i = 0; i < n; ++i) {
    s = s * 1103515245u + 12345u;
    t.push_back(int32_t((s >> 8) % uint32_t(n_vocab - 8)));
  }
  return t;
}

// Largest |a - b| relative to the largest |b|.
double rel_max_diff(const float* a, const float* b, size_t n) {
  double diff = 0, scale = 1e-6;
  for (size_t i = 0; i < n; ++i) {
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    scale = std::max(scale, double(std::fabs(b[i])));
  }
  return diff / scale;
}

class ForwardTest : public ::testing::TestWithParam<Variant> {};

TEST_P(ForwardTest, OptimizedMatchesReferenceAndDecodeMatchesPrefill) {
  const Variant& v = GetParam();
  const std::string path = testing::write_model(v.spec, std::string("fwd_") + v.name);
  auto model = Model::load(path);
  const int64_t V = model->config().n_vocab;
  testing::ReferenceModel ref(model->file());
  ASSERT_EQ(ref.n_vocab(), V);
  const std::vector<int32_t> tokens = test_tokens(14, V);
  const std::vector<float> expected = ref.forward(tokens);

  ThreadPool pool(2);
  SingleSequence prefill_all(*model, 32, KvDtype::f32);
  const std::vector<float> batched = prefill_all.prefill(tokens, true, pool);
  ASSERT_EQ(batched.size(), expected.size());
  // f32 weights: only the order of float additions differs from the double reference.
  for (size_t t = 0; t < tokens.size(); ++t) {
    EXPECT_LT(rel_max_diff(batched.data() + t * V, expected.data() + t * V, size_t(V)), 2e-4)
        << v.name << ": prefill row " << t;
  }

  // Bit-identical logits from a chunked prefill followed by one-token decode steps: every
  // kernel sums a token's products in the same order whatever the batch.
  SingleSequence stepwise(*model, 32, KvDtype::f32);
  std::vector<float> rows = stepwise.prefill({tokens.begin(), tokens.begin() + 5}, true, pool);
  const std::vector<float>& chunk = stepwise.prefill({tokens.begin() + 5, tokens.begin() + 9}, true, pool);
  rows.insert(rows.end(), chunk.begin(), chunk.end());
  for (size_t t = 9; t < tokens.size(); ++t) {
    const std::vector<float>& l = stepwise.decode(tokens[t], pool);
    rows.insert(rows.end(), l.begin(), l.end());
  }
  ASSERT_EQ(rows.size(), expected.size());
  for (size_t t = 0; t < tokens.size(); ++t) {
    EXPECT_EQ(rel_max_diff(rows.data() + t * V, batched.data() + t * V, size_t(V)), 0.0)
        << v.name << ": decode row " << t << " differs from the batched prefill";
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, ForwardTest, ::testing::ValuesIn(variants()),
                         [](const auto& info) { return std::string(info.param.name); });

// Quantized weights: the engine quantizes activations too (as llama.cpp does), so it is
// compared with the reference on the same file within a looser bound, and batched prefill
// must agree with decode steps.
class QuantizedForwardTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(QuantizedForwardTest, CloseToReferenceOnTheSameFile) {
  GenSpec spec = tiny(Arch::Deepseek2);
  spec.type = GetParam();
  // With seed 42 the q5_0 model has a near-tie in an early router decision that the
  // activation rounding flips, and the flip propagates through the cache to every row;
  // seed 43 has no such tie for any type.
  spec.seed = 43;
  const std::string path = testing::write_model(spec, std::string("fwdq_") + std::string(type_name(spec.type)));
  auto model = Model::load(path);
  const int64_t V = model->config().n_vocab;
  testing::ReferenceModel ref(model->file());
  const std::vector<int32_t> tokens = test_tokens(10, V);
  const std::vector<float> expected = ref.forward(tokens);
  ThreadPool pool(2);
  SingleSequence seq(*model, 16, KvDtype::f32);
  const std::vector<float> got = seq.prefill(tokens, true, pool);
  // A tiny random model amplifies quantization noise where a router decision is close, so
  // individual rows may move; most rows must stay close and keep their greedy token.
  int agree = 0, close = 0;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const float* g = got.data() + t * V;
    const float* e = expected.data() + t * V;
    agree += std::max_element(g, g + V) - g == std::max_element(e, e + V) - e;
    close += rel_max_diff(g, e, size_t(V)) < 0.15;
  }
  EXPECT_GE(agree, int(tokens.size()) - 2) << "greedy tokens disagree with the reference";
  EXPECT_GE(close, int(tokens.size()) - 2) << "logits far from the reference";

  SingleSequence stepwise(*model, 16, KvDtype::f32);
  std::vector<float> rows = stepwise.prefill({tokens[0]}, true, pool);
  for (size_t t = 1; t < tokens.size(); ++t) {
    const std::vector<float>& l = stepwise.decode(tokens[t], pool);
    rows.insert(rows.end(), l.begin(), l.end());
  }
  for (size_t t = 0; t < tokens.size(); ++t) {
    EXPECT_EQ(rel_max_diff(rows.data() + t * V, got.data() + t * V, size_t(V)), 0.0) << "decode row " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, QuantizedForwardTest,
                         ::testing::Values(GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                                           GgmlType::Q5_0, GgmlType::Q4_1, GgmlType::Q5_1, GgmlType::Q4_K,
                                           GgmlType::Q5_K, GgmlType::Q6_K),
                         [](const auto& info) { return std::string(type_name(info.param)); });

// Where the AVX-512 path is chosen, loading regroups q8_0, q4_K and q6_K matrices 16 rows
// at a time for its kernels, whose products equal the file layout's up to the order of
// float additions (regrouped_test). With q8_0 the logits stay within 1e-3 of the file
// layout's, with the same greedy tokens. With the q4_K_M mix (q4_K and q6_K) that order
// tips an activation code (one scale per 256 values) to the next value now and then, and this tiny random model amplifies it as
// it does quantization noise (QuantizedForwardTest): rows moved by 1-3% were measured, so
// there most rows must keep the greedy token and stay within 0.15.
TEST(RegroupedWeights, AnswerLikeTheFileLayout) {
  if (!regroup_here()) GTEST_SKIP() << "this CPU does not take the AVX-512 path: weights stay as in the file";
  for (auto [arch, type] : {std::pair{Arch::Deepseek2, GgmlType::Q8_0}, {Arch::Qwen3Moe, GgmlType::Q8_0},
                            {Arch::Deepseek2, GgmlType::Q4_K}, {Arch::Qwen3Moe, GgmlType::Q4_K}}) {
    const std::string what = std::string(type == GgmlType::Q4_K ? "q4_K_M" : "q8_0") +
                             (arch == Arch::Deepseek2 ? " deepseek2" : " qwen3moe");
    GenSpec spec = tiny(arch);
    spec.type = type;
    spec.q4_k_m = type == GgmlType::Q4_K;
    const std::string path = testing::write_model(
        spec, std::string("regroup_") + (arch == Arch::Deepseek2 ? "ds_" : "qw_") + std::string(type_name(type)));
    auto regrouped = Model::load(path);
    ::setenv("MOENGINE_REGROUP", "0", 1);
    auto plain = Model::load(path);
    ::unsetenv("MOENGINE_REGROUP");
    EXPECT_GT(regrouped->regrouped_weight_bytes(), regrouped->total_weight_bytes() / 2) << what;
    EXPECT_GE(regrouped->moved_weight_bytes(), regrouped->regrouped_weight_bytes()) << what;
    EXPECT_EQ(plain->regrouped_weight_bytes(), 0u) << what;

    const int64_t V = plain->config().n_vocab;
    const std::vector<int32_t> tokens = test_tokens(12, V);
    ThreadPool pool(2);
    SingleSequence a(*regrouped, 16, KvDtype::f32), b(*plain, 16, KvDtype::f32);
    const std::vector<float> got = a.prefill(tokens, true, pool);
    const std::vector<float> want = b.prefill(tokens, true, pool);
    const bool exact_sums = type == GgmlType::Q8_0;
    int agree = 0, close = 0;
    for (size_t t = 0; t < tokens.size(); ++t) {
      const float* g = got.data() + t * V;
      const float* w = want.data() + t * V;
      const bool same_token = std::max_element(g, g + V) - g == std::max_element(w, w + V) - w;
      const double diff = rel_max_diff(g, w, size_t(V));
      agree += same_token;
      close += diff < 0.15;
      if (exact_sums) {
        EXPECT_LT(diff, 1e-3) << what << ", row " << t;
        EXPECT_TRUE(same_token) << what << ", row " << t;
      }
    }
    EXPECT_GE(agree, int(tokens.size()) - 2) << what << ": greedy tokens disagree with the file layout's";
    EXPECT_GE(close, int(tokens.size()) - 2) << what << ": logits far from the file layout's";
  }
}

// Weights of other types than q8_0 are moved into huge pages as they are: the same bytes,
// so the same bits out, on every path.
TEST(MovedWeights, GiveTheSameBitsAsTheFilePages) {
  for (Arch arch : {Arch::Deepseek2, Arch::Qwen3Moe}) {
    GenSpec spec = tiny(arch);
    spec.type = GgmlType::BF16;
    const std::string path = testing::write_model(spec, std::string("moved_") + (arch == Arch::Deepseek2 ? "ds" : "qw"));
    auto moved = Model::load(path);
    ::setenv("MOENGINE_REGROUP", "0", 1);
    auto plain = Model::load(path);
    ::unsetenv("MOENGINE_REGROUP");
    EXPECT_GT(moved->moved_weight_bytes(), moved->total_weight_bytes() / 2);
    EXPECT_EQ(moved->regrouped_weight_bytes(), 0u);
    EXPECT_EQ(plain->moved_weight_bytes(), 0u);

    const std::vector<int32_t> tokens = test_tokens(12, plain->config().n_vocab);
    ThreadPool pool(2);
    SingleSequence a(*moved, 16, KvDtype::f32), b(*plain, 16, KvDtype::f32);
    EXPECT_EQ(a.prefill(tokens, true, pool), b.prefill(tokens, true, pool));
  }
}

}  // namespace
}  // namespace moe
