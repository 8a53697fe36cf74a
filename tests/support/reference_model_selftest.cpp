// Sanity checks of the reference forward pass on tiny random GGUF models built in memory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "core/error.h"
#include "kernels/ggml_type.h"
#include "kernels/quant.h"
#include "model/gguf.h"
#include "support/reference_model.h"

namespace moe::testing {
namespace {

// ---- tiny model files ---------------------------------------------------------------------

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct TensorData {
  std::vector<int64_t> ne;
  std::vector<float> v;
  GgmlType type = GgmlType::F32;
  int64_t n() const {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    return n;
  }
};

using Meta = std::variant<uint32_t, float, bool, std::string>;

struct Spec {
  std::map<std::string, Meta> meta;
  std::map<std::string, TensorData> tensors;

  // Uniform(-a, a) values seeded by the tensor name, so specs that differ in one tensor share
  // all the others.
  void random(const std::string& name, std::vector<int64_t> ne, float a, float offset = 0.0f) {
    TensorData t{std::move(ne), {}};
    uint64_t s = std::hash<std::string>{}(name) ^ 0x1234567ull;
    t.v.resize(size_t(t.n()));
    for (float& x : t.v) x = offset + a * float(2.0 * double(splitmix(s) >> 11) / double(1ull << 53) - 1.0);
    tensors[name] = std::move(t);
  }
  void zero(const std::string& name) {
    for (float& x : tensors.at(name).v) x = 0.0f;
  }

  std::vector<uint8_t> bytes() const {
    GgufWriter w;
    for (const auto& [k, v] : meta) {
      if (auto* u = std::get_if<uint32_t>(&v)) w.set_u32(k, *u);
      if (auto* f = std::get_if<float>(&v)) w.set_f32(k, *f);
      if (auto* b = std::get_if<bool>(&v)) w.set_bool(k, *b);
      if (auto* s = std::get_if<std::string>(&v)) w.set_string(k, *s);
    }
    for (const auto& [name, t] : tensors) {
      const TensorData* tp = &t;
      w.add_tensor(name, t.type, t.ne, [tp](uint8_t* dst, size_t n_bytes) {
        const int64_t ne0 = tp->ne[0];
        const size_t rb = row_bytes(tp->type, ne0);
        ASSERT_EQ(n_bytes, rb * size_t(tp->n() / ne0));
        for (int64_t r = 0; r < tp->n() / ne0; ++r) {
          if (tp->type == GgmlType::F32) {
            std::memcpy(dst + size_t(r) * rb, tp->v.data() + r * ne0, rb);
          } else {
            quantize_row(tp->type, tp->v.data() + r * ne0, dst + size_t(r) * rb, ne0);
          }
        }
      });
    }
    return w.to_bytes();
  }
};

ReferenceModel load(const Spec& s) {
  const std::vector<uint8_t> b = s.bytes();
  const GgufFile f("tiny.gguf", b.data(), b.size());
  return ReferenceModel(f);  // keeps its own f32 copy of every weight
}

struct DsOpt {
  int64_t n_layer = 2, n_embd = 32, n_head = 2, q_lora = 16, r_kv = 16, d_nope = 8, d_rope = 8, d_v = 8;
  int64_t n_vocab = 40, n_expert = 8, n_used = 2, n_ff_exp = 12, n_shared = 1, n_dense = 1, n_ff = 24;
  int64_t n_group = 4, n_group_used = 2;
  uint32_t gating = 2;
  bool bias = true, norm = true, split = true, yarn = true;
  float scale = 2.5f;
};

Spec deepseek2(const DsOpt& o) {
  Spec s;
  const std::string a = "deepseek2.";
  s.meta["general.architecture"] = std::string("deepseek2");
  s.meta[a + "block_count"] = uint32_t(o.n_layer);
  s.meta[a + "context_length"] = uint32_t(256);
  s.meta[a + "embedding_length"] = uint32_t(o.n_embd);
  s.meta[a + "feed_forward_length"] = uint32_t(o.n_ff);
  s.meta[a + "attention.head_count"] = uint32_t(o.n_head);
  s.meta[a + "attention.layer_norm_rms_epsilon"] = 1e-6f;
  if (o.q_lora > 0) s.meta[a + "attention.q_lora_rank"] = uint32_t(o.q_lora);
  s.meta[a + "attention.kv_lora_rank"] = uint32_t(o.r_kv);
  if (o.split) {
    s.meta[a + "attention.head_count_kv"] = uint32_t(1);
    s.meta[a + "attention.key_length"] = uint32_t(o.r_kv + o.d_rope);
    s.meta[a + "attention.value_length"] = uint32_t(o.r_kv);
    s.meta[a + "attention.key_length_mla"] = uint32_t(o.d_nope + o.d_rope);
    s.meta[a + "attention.value_length_mla"] = uint32_t(o.d_v);
  } else {
    s.meta[a + "attention.head_count_kv"] = uint32_t(o.n_head);
    s.meta[a + "attention.key_length"] = uint32_t(o.d_nope + o.d_rope);
    s.meta[a + "attention.value_length"] = uint32_t(o.d_v);
  }
  s.meta[a + "rope.dimension_count"] = uint32_t(o.d_rope);
  s.meta[a + "rope.freq_base"] = 10000.0f;
  if (o.yarn) {
    s.meta[a + "rope.scaling.type"] = std::string("yarn");
    s.meta[a + "rope.scaling.factor"] = 4.0f;
    s.meta[a + "rope.scaling.original_context_length"] = uint32_t(16);
    s.meta[a + "rope.scaling.yarn_log_multiplier"] = 0.1f;
  }
  s.meta[a + "leading_dense_block_count"] = uint32_t(o.n_dense);
  s.meta[a + "expert_count"] = uint32_t(o.n_expert);
  s.meta[a + "expert_used_count"] = uint32_t(o.n_used);
  s.meta[a + "expert_shared_count"] = uint32_t(o.n_shared);
  s.meta[a + "expert_feed_forward_length"] = uint32_t(o.n_ff_exp);
  s.meta[a + "expert_weights_scale"] = o.scale;
  if (o.norm) s.meta[a + "expert_weights_norm"] = true;
  s.meta[a + "expert_gating_func"] = o.gating;
  if (o.n_group > 1) {
    s.meta[a + "expert_group_count"] = uint32_t(o.n_group);
    s.meta[a + "expert_group_used_count"] = uint32_t(o.n_group_used);
  }

  const int64_t E = o.n_embd, H = o.n_head, dqk = o.d_nope + o.d_rope;
  const float we = 1.0f / std::sqrt(float(E));
  s.random("token_embd.weight", {E, o.n_vocab}, 1.0f);
  s.random("output_norm.weight", {E}, 0.2f, 1.0f);
  s.random("output.weight", {E, o.n_vocab}, we);
  for (int64_t il = 0; il < o.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    s.random(b + "attn_norm.weight", {E}, 0.2f, 1.0f);
    s.random(b + "ffn_norm.weight", {E}, 0.2f, 1.0f);
    if (o.q_lora > 0) {
      s.random(b + "attn_q_a.weight", {E, o.q_lora}, we);
      s.random(b + "attn_q_a_norm.weight", {o.q_lora}, 0.2f, 1.0f);
      s.random(b + "attn_q_b.weight", {o.q_lora, H * dqk}, 1.0f / std::sqrt(float(o.q_lora)));
    } else {
      s.random(b + "attn_q.weight", {E, H * dqk}, we);
    }
    s.random(b + "attn_kv_a_mqa.weight", {E, o.r_kv + o.d_rope}, we);
    s.random(b + "attn_kv_a_norm.weight", {o.r_kv}, 0.2f, 1.0f);
    // kv_b is the source of truth; the split form is derived as the converter does it.
    s.random(b + "attn_kv_b.weight", {o.r_kv, H * (o.d_nope + o.d_v)}, 1.0f / std::sqrt(float(o.r_kv)));
    if (o.split) {
      const TensorData kv = s.tensors.at(b + "attn_kv_b.weight");
      TensorData kb{{o.d_nope, o.r_kv, H}, {}}, vb{{o.r_kv, o.d_v, H}, {}};
      kb.v.resize(size_t(kb.n()));
      vb.v.resize(size_t(vb.n()));
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t r = 0; r < o.r_kv; ++r) {
          for (int64_t n = 0; n < o.d_nope; ++n) {
            kb.v[size_t((h * o.r_kv + r) * o.d_nope + n)] = kv.v[size_t((h * (o.d_nope + o.d_v) + n) * o.r_kv + r)];
          }
          for (int64_t d = 0; d < o.d_v; ++d) {
            vb.v[size_t((h * o.d_v + d) * o.r_kv + r)] =
                kv.v[size_t((h * (o.d_nope + o.d_v) + o.d_nope + d) * o.r_kv + r)];
          }
        }
      }
      s.tensors.erase(b + "attn_kv_b.weight");
      s.tensors[b + "attn_k_b.weight"] = kb;
      s.tensors[b + "attn_v_b.weight"] = vb;
    }
    s.random(b + "attn_output.weight", {H * o.d_v, E}, 1.0f / std::sqrt(float(H * o.d_v)));
    if (il < o.n_dense) {
      s.random(b + "ffn_gate.weight", {E, o.n_ff}, we);
      s.random(b + "ffn_up.weight", {E, o.n_ff}, we);
      s.random(b + "ffn_down.weight", {o.n_ff, E}, 1.0f / std::sqrt(float(o.n_ff)));
      continue;
    }
    s.random(b + "ffn_gate_inp.weight", {E, o.n_expert}, we);
    if (o.bias) s.random(b + "exp_probs_b.bias", {o.n_expert}, 0.3f);
    s.random(b + "ffn_gate_exps.weight", {E, o.n_ff_exp, o.n_expert}, we);
    s.random(b + "ffn_up_exps.weight", {E, o.n_ff_exp, o.n_expert}, we);
    s.random(b + "ffn_down_exps.weight", {o.n_ff_exp, E, o.n_expert}, 1.0f / std::sqrt(float(o.n_ff_exp)));
    if (o.n_shared > 0) {
      const int64_t F = o.n_ff_exp * o.n_shared;
      s.random(b + "ffn_gate_shexp.weight", {E, F}, we);
      s.random(b + "ffn_up_shexp.weight", {E, F}, we);
      s.random(b + "ffn_down_shexp.weight", {F, E}, 1.0f / std::sqrt(float(F)));
    }
  }
  return s;
}

struct QwOpt {
  int64_t n_layer = 2, n_embd = 32, n_head = 4, n_head_kv = 2, head_dim = 8, n_vocab = 40;
  int64_t n_expert = 8, n_used = 2, n_ff_exp = 12;
};

Spec qwen3moe(const QwOpt& o) {
  Spec s;
  const std::string a = "qwen3moe.";
  s.meta["general.architecture"] = std::string("qwen3moe");
  s.meta[a + "block_count"] = uint32_t(o.n_layer);
  s.meta[a + "context_length"] = uint32_t(256);
  s.meta[a + "embedding_length"] = uint32_t(o.n_embd);
  s.meta[a + "feed_forward_length"] = uint32_t(3 * o.n_embd);
  s.meta[a + "attention.head_count"] = uint32_t(o.n_head);
  s.meta[a + "attention.head_count_kv"] = uint32_t(o.n_head_kv);
  s.meta[a + "attention.key_length"] = uint32_t(o.head_dim);
  s.meta[a + "attention.value_length"] = uint32_t(o.head_dim);
  s.meta[a + "attention.layer_norm_rms_epsilon"] = 1e-6f;
  s.meta[a + "rope.freq_base"] = 1000000.0f;
  s.meta[a + "expert_count"] = uint32_t(o.n_expert);
  s.meta[a + "expert_used_count"] = uint32_t(o.n_used);
  s.meta[a + "expert_feed_forward_length"] = uint32_t(o.n_ff_exp);
  const int64_t E = o.n_embd, hd = o.head_dim;
  const float we = 1.0f / std::sqrt(float(E));
  s.random("token_embd.weight", {E, o.n_vocab}, 1.0f);
  s.random("output_norm.weight", {E}, 0.2f, 1.0f);
  s.random("output.weight", {E, o.n_vocab}, we);
  for (int64_t il = 0; il < o.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    s.random(b + "attn_norm.weight", {E}, 0.2f, 1.0f);
    s.random(b + "ffn_norm.weight", {E}, 0.2f, 1.0f);
    s.random(b + "attn_q.weight", {E, o.n_head * hd}, we);
    s.random(b + "attn_k.weight", {E, o.n_head_kv * hd}, we);
    s.random(b + "attn_v.weight", {E, o.n_head_kv * hd}, we);
    s.random(b + "attn_q_norm.weight", {hd}, 0.2f, 1.0f);
    s.random(b + "attn_k_norm.weight", {hd}, 0.2f, 1.0f);
    s.random(b + "attn_output.weight", {o.n_head * hd, E}, 1.0f / std::sqrt(float(o.n_head * hd)));
    s.random(b + "ffn_gate_inp.weight", {E, o.n_expert}, we);
    s.random(b + "ffn_gate_exps.weight", {E, o.n_ff_exp, o.n_expert}, we);
    s.random(b + "ffn_up_exps.weight", {E, o.n_ff_exp, o.n_expert}, we);
    s.random(b + "ffn_down_exps.weight", {o.n_ff_exp, E, o.n_expert}, 1.0f / std::sqrt(float(o.n_ff_exp)));
  }
  return s;
}

const std::vector<int32_t> kTokens = {3, 17, 5, 39, 0, 22, 8};

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0.0f;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// ---- hand computations used by the tests ---------------------------------------------------

std::vector<double> hand_rmsnorm(const std::vector<double>& x, const std::vector<float>& w) {
  double ss = 0.0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / double(x.size()) + 1e-6);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
  return y;
}

// W (ne = [n_in, n_out]) times x.
std::vector<double> hand_mul(const TensorData& w, const std::vector<double>& x) {
  std::vector<double> y(size_t(w.ne[1]), 0.0);
  for (int64_t o = 0; o < w.ne[1]; ++o) {
    for (int64_t i = 0; i < w.ne[0]; ++i) y[size_t(o)] += double(w.v[size_t(o * w.ne[0] + i)]) * x[size_t(i)];
  }
  return y;
}

std::vector<double> embedding(const Spec& s, int32_t tok) {
  const TensorData& t = s.tensors.at("token_embd.weight");
  return std::vector<double>(t.v.begin() + tok * t.ne[0], t.v.begin() + (tok + 1) * t.ne[0]);
}

std::vector<double> hand_logits(const Spec& s, const std::vector<double>& h) {
  return hand_mul(s.tensors.at("output.weight"), hand_rmsnorm(h, s.tensors.at("output_norm.weight").v));
}

void expect_row_near(const std::vector<float>& logits, size_t row, const std::vector<double>& want, double tol) {
  for (size_t v = 0; v < want.size(); ++v) {
    EXPECT_NEAR(logits[row * want.size() + v], want[v], tol) << "vocab entry " << v;
  }
}

// Rotates the pairs of x as ggml does with no scaling: mode NORMAL (2i, 2i+1) or NEOX (i, i+n/2).
std::vector<double> hand_rope(std::vector<double> x, int pos, double base, bool neox) {
  const size_t n = x.size();
  for (size_t i = 0; i < n / 2; ++i) {
    const double th = pos * std::pow(base, -2.0 * double(i) / double(n));
    const size_t a = neox ? i : 2 * i, b = neox ? i + n / 2 : 2 * i + 1;
    const double x0 = x[a], x1 = x[b];
    x[a] = x0 * std::cos(th) - x1 * std::sin(th);
    x[b] = x0 * std::sin(th) + x1 * std::cos(th);
  }
  return x;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// ---- tests ---------------------------------------------------------------------------------

TEST(ReferenceModel, PrefixLogitsDoNotDependOnLaterTokens) {
  for (const Spec& spec : {deepseek2(DsOpt{}), qwen3moe(QwOpt{})}) {
    const ReferenceModel m = load(spec);
    const int64_t V = m.n_vocab();
    ASSERT_EQ(V, 40);
    const std::vector<float> full = m.forward(kTokens);
    ASSERT_EQ(full.size(), kTokens.size() * size_t(V));
    for (float x : full) ASSERT_TRUE(std::isfinite(x));
    for (size_t n : {1, 3, 6}) {
      const std::vector<int32_t> prefix(kTokens.begin(), kTokens.begin() + long(n));
      const std::vector<float> part = m.forward(prefix);
      const std::vector<float> head(full.begin(), full.begin() + long(n * size_t(V)));
      EXPECT_EQ(max_abs_diff(part, head), 0.0f) << m.architecture() << " prefix " << n;
    }
    // Not degenerate: later positions see the earlier tokens.
    const std::vector<float> alone = m.forward({kTokens[1]});
    const std::vector<float> second(full.begin() + V, full.begin() + 2 * V);
    EXPECT_GT(max_abs_diff(alone, second), 1e-4f) << m.architecture();
  }
}

TEST(ReferenceModel, ZeroBlocksGiveOutputTimesNormedEmbedding) {
  DsOpt d;
  d.n_layer = 1;
  d.n_dense = 0;
  Spec ds = deepseek2(d);
  ds.zero("blk.0.attn_output.weight");
  ds.zero("blk.0.ffn_down_exps.weight");
  ds.zero("blk.0.ffn_down_shexp.weight");
  QwOpt q;
  q.n_layer = 1;
  Spec qw = qwen3moe(q);
  qw.zero("blk.0.attn_output.weight");
  qw.zero("blk.0.ffn_down_exps.weight");
  for (const Spec* s : {&ds, &qw}) {
    const ReferenceModel m = load(*s);
    const std::vector<float> logits = m.forward(kTokens);
    for (size_t t = 0; t < kTokens.size(); ++t) {
      expect_row_near(logits, t, hand_logits(*s, embedding(*s, kTokens[t])), 1e-5);
    }
  }
}

// One token attends only to itself: attention = W_o concat_h(v_h), v_h taken from kv_b
// rows h*(d_nope+d_v) + d_nope + d, for both the legacy and the split file.
TEST(ReferenceModel, SingleTokenMlaUsesTheValueHalfOfKvB) {
  DsOpt d;
  d.n_layer = 1;
  d.n_dense = 0;
  d.split = false;
  Spec legacy = deepseek2(d);
  legacy.zero("blk.0.ffn_down_exps.weight");
  legacy.zero("blk.0.ffn_down_shexp.weight");
  d.split = true;
  Spec split = deepseek2(d);
  split.zero("blk.0.ffn_down_exps.weight");
  split.zero("blk.0.ffn_down_shexp.weight");

  const int32_t tok = 11;
  const std::vector<double> e = embedding(legacy, tok);
  const std::vector<double> x = hand_rmsnorm(e, legacy.tensors.at("blk.0.attn_norm.weight").v);
  const std::vector<double> a = hand_mul(legacy.tensors.at("blk.0.attn_kv_a_mqa.weight"), x);
  const std::vector<double> c =
      hand_rmsnorm(std::vector<double>(a.begin(), a.begin() + d.r_kv), legacy.tensors.at("blk.0.attn_kv_a_norm.weight").v);
  const TensorData& kv = legacy.tensors.at("blk.0.attn_kv_b.weight");
  std::vector<double> o;
  for (int64_t h = 0; h < d.n_head; ++h) {
    for (int64_t j = 0; j < d.d_v; ++j) {
      double acc = 0.0;
      for (int64_t r = 0; r < d.r_kv; ++r) acc += kv.v[size_t((h * (d.d_nope + d.d_v) + d.d_nope + j) * d.r_kv + r)] * c[size_t(r)];
      o.push_back(acc);
    }
  }
  std::vector<double> h = hand_mul(legacy.tensors.at("blk.0.attn_output.weight"), o);
  for (size_t i = 0; i < h.size(); ++i) h[i] += e[i];
  const std::vector<double> want = hand_logits(legacy, h);
  expect_row_near(load(legacy).forward({tok}), 0, want, 1e-5);
  expect_row_near(load(split).forward({tok}), 0, want, 1e-5);
}

TEST(ReferenceModel, SplitKbVbAndLegacyKvBAgree) {
  for (int64_t q_lora : {16, 0}) {
    DsOpt d;
    d.q_lora = q_lora;
    d.split = false;
    const std::vector<float> legacy = load(deepseek2(d)).forward(kTokens);
    d.split = true;
    const std::vector<float> split = load(deepseek2(d)).forward(kTokens);
    EXPECT_LE(max_abs_diff(legacy, split), 1e-6f) << "q_lora_rank " << q_lora;
  }
}

// Two tokens, one head, no YaRN: position 1 attends to positions 0 and 1 with q/k rotated
// in the architecture's RoPE mode (qwen3moe NEOX halves, deepseek2 NORMAL pairs).
TEST(ReferenceModel, TwoTokenAttentionByHand) {
  {
    QwOpt q;
    q.n_layer = 1;
    q.n_head = 1;
    q.n_head_kv = 1;
    q.head_dim = 4;
    Spec s = qwen3moe(q);
    s.zero("blk.0.ffn_down_exps.weight");
    const std::vector<int32_t> toks = {7, 30};
    std::vector<std::vector<double>> qs, ks, vs;
    for (int pos = 0; pos < 2; ++pos) {
      const std::vector<double> x = hand_rmsnorm(embedding(s, toks[size_t(pos)]), s.tensors.at("blk.0.attn_norm.weight").v);
      qs.push_back(hand_rope(hand_rmsnorm(hand_mul(s.tensors.at("blk.0.attn_q.weight"), x), s.tensors.at("blk.0.attn_q_norm.weight").v), pos, 1e6, true));
      ks.push_back(hand_rope(hand_rmsnorm(hand_mul(s.tensors.at("blk.0.attn_k.weight"), x), s.tensors.at("blk.0.attn_k_norm.weight").v), pos, 1e6, true));
      vs.push_back(hand_mul(s.tensors.at("blk.0.attn_v.weight"), x));
    }
    const double s0 = dot(qs[1], ks[0]) / 2.0, s1 = dot(qs[1], ks[1]) / 2.0;  // 1/sqrt(4)
    const double p0 = 1.0 / (1.0 + std::exp(s1 - s0)), p1 = 1.0 - p0;
    std::vector<double> o(4);
    for (size_t i = 0; i < 4; ++i) o[i] = p0 * vs[0][i] + p1 * vs[1][i];
    std::vector<double> h = hand_mul(s.tensors.at("blk.0.attn_output.weight"), o);
    const std::vector<double> e = embedding(s, toks[1]);
    for (size_t i = 0; i < h.size(); ++i) h[i] += e[i];
    expect_row_near(load(s).forward(toks), 1, hand_logits(s, h), 1e-5);
  }
  {
    DsOpt d;
    d.n_layer = 1;
    d.n_dense = 0;
    d.n_head = 1;
    d.q_lora = 0;
    d.d_nope = 2;
    d.d_rope = 4;
    d.d_v = 3;
    d.r_kv = 5;
    d.yarn = false;
    d.split = false;
    Spec s = deepseek2(d);
    s.zero("blk.0.ffn_down_exps.weight");
    s.zero("blk.0.ffn_down_shexp.weight");
    const std::vector<int32_t> toks = {2, 19};
    std::vector<std::vector<double>> qs, ks, vs;
    const TensorData& kv = s.tensors.at("blk.0.attn_kv_b.weight");  // rows: 2 k_nope, then 3 v
    for (int pos = 0; pos < 2; ++pos) {
      const std::vector<double> x = hand_rmsnorm(embedding(s, toks[size_t(pos)]), s.tensors.at("blk.0.attn_norm.weight").v);
      const std::vector<double> q = hand_mul(s.tensors.at("blk.0.attn_q.weight"), x);
      const std::vector<double> a = hand_mul(s.tensors.at("blk.0.attn_kv_a_mqa.weight"), x);
      const std::vector<double> c = hand_rmsnorm({a.begin(), a.begin() + 5}, s.tensors.at("blk.0.attn_kv_a_norm.weight").v);
      const std::vector<double> kvc = hand_mul(kv, c);
      const std::vector<double> q_pe = hand_rope({q.begin() + 2, q.end()}, pos, 10000.0, false);
      const std::vector<double> k_pe = hand_rope({a.begin() + 5, a.end()}, pos, 10000.0, false);
      qs.push_back({q[0], q[1], q_pe[0], q_pe[1], q_pe[2], q_pe[3]});
      ks.push_back({kvc[0], kvc[1], k_pe[0], k_pe[1], k_pe[2], k_pe[3]});
      vs.push_back({kvc[2], kvc[3], kvc[4]});
    }
    const double scale = 1.0 / std::sqrt(6.0);
    const double s0 = dot(qs[1], ks[0]) * scale, s1 = dot(qs[1], ks[1]) * scale;
    const double p0 = 1.0 / (1.0 + std::exp(s1 - s0)), p1 = 1.0 - p0;
    std::vector<double> o(3);
    for (size_t i = 0; i < 3; ++i) o[i] = p0 * vs[0][i] + p1 * vs[1][i];
    std::vector<double> h = hand_mul(s.tensors.at("blk.0.attn_output.weight"), o);
    const std::vector<double> e = embedding(s, toks[1]);
    for (size_t i = 0; i < h.size(); ++i) h[i] += e[i];
    expect_row_near(load(s).forward(toks), 1, hand_logits(s, h), 1e-5);
  }
}

// Expert `e` of a stack by hand: down_e( silu(gate_e x) * up_e x ).
std::vector<double> hand_expert(const Spec& s, const std::string& b, int64_t e, const std::vector<double>& x) {
  auto slice = [&](const char* name) {
    const TensorData& t = s.tensors.at(b + name);
    const int64_t n = t.ne[0] * t.ne[1];
    return TensorData{{t.ne[0], t.ne[1]}, {t.v.begin() + e * n, t.v.begin() + (e + 1) * n}};
  };
  std::vector<double> g = hand_mul(slice("ffn_gate_exps.weight"), x);
  const std::vector<double> u = hand_mul(slice("ffn_up_exps.weight"), x);
  for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
  return hand_mul(slice("ffn_down_exps.weight"), g);
}

// With attention switched off the layer output is e + sum_e w_e expert_e(ffn_norm(e)).
// deepseek2: a large bias forces the choice (directly or through the group limit); the
// weights are the UNbiased scores, normalized, times expert_weights_scale. qwen3moe:
// softmax top-2, always renormalized.
TEST(ReferenceModel, GatingWeightsByHand) {
  struct Case {
    uint32_t gating;
    int64_t n_group, n_group_used;
    std::vector<float> bias;
    int64_t a, b;  // the experts that must be chosen
  };
  const Case cases[] = {
      {2, 1, 1, {50, 60, 0, 0, 0, 0, 0, 0}, 0, 1},
      // groups of 2, keep 1: group 0 has the best single expert, group 1 the best pair
      {1, 4, 1, {10, 0, 6, 6, 0, 0, 0, 0}, 0, 1},  // softmax (V2): group score = max
      {2, 4, 1, {10, 0, 6, 6, 0, 0, 0, 0}, 2, 3},  // sigmoid (V3): group score = top-2 sum
  };
  for (const Case& c : cases) {
    DsOpt d;
    d.n_layer = 1;
    d.n_dense = 0;
    d.gating = c.gating;
    d.n_group = c.n_group;
    d.n_group_used = c.n_group_used;
    Spec s = deepseek2(d);
    s.zero("blk.0.attn_output.weight");
    s.zero("blk.0.ffn_down_shexp.weight");
    s.tensors.at("blk.0.exp_probs_b.bias").v = c.bias;
    const std::vector<float> logits = load(s).forward(kTokens);
    for (size_t t = 0; t < kTokens.size(); ++t) {
      const std::vector<double> e = embedding(s, kTokens[t]);
      const std::vector<double> x = hand_rmsnorm(e, s.tensors.at("blk.0.ffn_norm.weight").v);
      const std::vector<double> l = hand_mul(s.tensors.at("blk.0.ffn_gate_inp.weight"), x);
      std::vector<double> sc(l.size());
      double z = 0.0;
      for (size_t i = 0; i < l.size(); ++i) z += std::exp(l[i]);
      for (size_t i = 0; i < l.size(); ++i) sc[i] = c.gating == 1 ? std::exp(l[i]) / z : 1.0 / (1.0 + std::exp(-l[i]));
      const double sa = sc[size_t(c.a)], sb = sc[size_t(c.b)];
      const std::vector<double> ya = hand_expert(s, "blk.0.", c.a, x), yb = hand_expert(s, "blk.0.", c.b, x);
      std::vector<double> h = e;
      for (size_t i = 0; i < h.size(); ++i) h[i] += 2.5 * (sa * ya[i] + sb * yb[i]) / (sa + sb);
      expect_row_near(logits, t, hand_logits(s, h), 1e-5);
    }
  }
  {
    QwOpt q;
    q.n_layer = 1;
    Spec s = qwen3moe(q);
    s.zero("blk.0.attn_output.weight");
    const std::vector<float> logits = load(s).forward(kTokens);
    for (size_t t = 0; t < kTokens.size(); ++t) {
      const std::vector<double> e = embedding(s, kTokens[t]);
      const std::vector<double> x = hand_rmsnorm(e, s.tensors.at("blk.0.ffn_norm.weight").v);
      const std::vector<double> l = hand_mul(s.tensors.at("blk.0.ffn_gate_inp.weight"), x);
      int64_t a = 0, b = -1;  // the two largest logits
      for (int64_t i = 1; i < q.n_expert; ++i) {
        if (l[size_t(i)] > l[size_t(a)]) {
          b = a;
          a = i;
        } else if (b < 0 || l[size_t(i)] > l[size_t(b)]) {
          b = i;
        }
      }
      const double wa = 1.0 / (1.0 + std::exp(l[size_t(b)] - l[size_t(a)])), wb = 1.0 - wa;
      const std::vector<double> ya = hand_expert(s, "blk.0.", a, x), yb = hand_expert(s, "blk.0.", b, x);
      std::vector<double> h = e;
      for (size_t i = 0; i < h.size(); ++i) h[i] += wa * ya[i] + wb * yb[i];
      expect_row_near(logits, t, hand_logits(s, h), 1e-5);
    }
  }
}

TEST(ReferenceModel, AbsentExpertBiasEqualsZeroBias) {
  DsOpt d;
  d.bias = false;
  const std::vector<float> none = load(deepseek2(d)).forward(kTokens);
  d.bias = true;
  Spec zero = deepseek2(d);
  for (int64_t il = d.n_dense; il < d.n_layer; ++il) zero.zero("blk." + std::to_string(il) + ".exp_probs_b.bias");
  EXPECT_EQ(max_abs_diff(none, load(zero).forward(kTokens)), 0.0f);
  // ...and a real bias is used (it changes which experts are chosen).
  Spec big = deepseek2(d);
  for (float& b : big.tensors.at("blk.1.exp_probs_b.bias").v) b *= 10.0f;
  EXPECT_GT(max_abs_diff(none, load(big).forward(kTokens)), 1e-4f);
}

TEST(ReferenceModel, GroupLimitKeepingAllGroupsIsNoLimit) {
  for (uint32_t gating : {1u, 2u}) {
    DsOpt d;
    d.gating = gating;
    d.n_group = 1;
    const std::vector<float> plain = load(deepseek2(d)).forward(kTokens);
    d.n_group = 4;
    d.n_group_used = 4;
    EXPECT_EQ(max_abs_diff(plain, load(deepseek2(d)).forward(kTokens)), 0.0f) << "gating " << gating;
    d.n_group_used = 1;
    EXPECT_GT(max_abs_diff(plain, load(deepseek2(d)).forward(kTokens)), 1e-4f) << "gating " << gating;
  }
}

TEST(ReferenceModel, MissingOutputMeansTiedEmbeddings) {
  Spec tied = qwen3moe(QwOpt{});
  tied.tensors.erase("output.weight");
  Spec copy = qwen3moe(QwOpt{});
  copy.tensors["output.weight"] = copy.tensors.at("token_embd.weight");
  EXPECT_EQ(max_abs_diff(load(tied).forward(kTokens), load(copy).forward(kTokens)), 0.0f);
}

TEST(ReferenceModel, QuantizedWeightsReadAsTheirDequantizedValues) {
  QwOpt q;
  q.n_embd = 64;
  q.head_dim = 32;
  q.n_ff_exp = 64;
  Spec quant = qwen3moe(q);
  Spec f32 = quant;
  for (auto& [name, t] : quant.tensors) {
    if (t.ne.size() < 2) continue;
    t.type = GgmlType::Q8_0;
    TensorData& ref = f32.tensors.at(name);
    std::vector<uint8_t> buf(row_bytes(GgmlType::Q8_0, t.ne[0]));
    for (int64_t r = 0; r < t.n() / t.ne[0]; ++r) {
      quantize_row(GgmlType::Q8_0, t.v.data() + r * t.ne[0], buf.data(), t.ne[0]);
      dequantize_row(GgmlType::Q8_0, buf.data(), ref.v.data() + r * t.ne[0], t.ne[0]);
    }
  }
  EXPECT_EQ(max_abs_diff(load(quant).forward(kTokens), load(f32).forward(kTokens)), 0.0f);
}

TEST(ReferenceModel, YarnConstants) {
  // DeepSeek-V3 shape: q/k head 192 (128 + 64), factor 40, mscale_all_dim 1 (GGUF 0.1).
  DsOpt d;
  d.n_layer = 1;
  d.n_dense = 1;
  d.n_embd = 16;
  d.n_head = 1;
  d.q_lora = 0;
  d.d_nope = 128;
  d.d_rope = 64;
  d.r_kv = 8;
  Spec v3 = deepseek2(d);
  v3.meta["deepseek2.rope.scaling.factor"] = 40.0f;
  v3.meta["deepseek2.rope.scaling.original_context_length"] = uint32_t(4096);
  const ReferenceModel m3 = load(v3);
  const double ms3 = 1.0 + 0.1 * std::log(40.0);
  EXPECT_NEAR(m3.kq_scale(), ms3 * ms3 / std::sqrt(192.0), 1e-6);
  EXPECT_NEAR(m3.kq_scale(), 0.135234, 1e-6);
  EXPECT_NEAR(m3.rope_magnitude(), 1.0, 1e-6);
  // DeepSeek-V2(-Lite): mscale = mscale_all_dim = 0.707 (GGUF 0.0707).
  v3.meta["deepseek2.rope.scaling.yarn_log_multiplier"] = 0.0707f;
  const ReferenceModel m2 = load(v3);
  const double ms2 = 1.0 + 0.0707 * std::log(40.0);
  EXPECT_NEAR(m2.kq_scale(), ms2 * ms2 / std::sqrt(192.0), 1e-6);
  EXPECT_NEAR(m2.rope_magnitude(), 1.0, 1e-6);
  // No scaling at all.
  d.yarn = false;
  const ReferenceModel m0 = load(deepseek2(d));
  EXPECT_NEAR(m0.kq_scale(), 1.0 / std::sqrt(192.0), 1e-9);
  EXPECT_NEAR(m0.rope_magnitude(), 1.0, 1e-12);
  // qwen3moe with YaRN: scale stays 1/sqrt(head_dim), the rope carries 1 + 0.1 ln(factor).
  Spec qy = qwen3moe(QwOpt{});
  qy.meta["qwen3moe.rope.scaling.type"] = std::string("yarn");
  qy.meta["qwen3moe.rope.scaling.factor"] = 4.0f;
  qy.meta["qwen3moe.rope.scaling.original_context_length"] = uint32_t(32);
  const ReferenceModel mq = load(qy);
  EXPECT_NEAR(mq.kq_scale(), 1.0 / std::sqrt(8.0), 1e-9);
  EXPECT_NEAR(mq.rope_magnitude(), 1.0 + 0.1 * std::log(4.0), 1e-6);
  EXPECT_GT(max_abs_diff(mq.forward(kTokens), load(qwen3moe(QwOpt{})).forward(kTokens)), 1e-4f);
}

TEST(ReferenceModel, BadFilesGiveErrorsNamingTheTensor) {
  Spec wrong = qwen3moe(QwOpt{});
  wrong.tensors.at("blk.1.attn_k.weight").ne = {32, 8, 2};
  try {
    (void)load(wrong);
    FAIL() << "a wrong shape was accepted";
  } catch (const moe::Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.1.attn_k.weight"), std::string::npos) << e.what();
  }
  Spec missing = deepseek2(DsOpt{});
  missing.tensors.erase("blk.0.ffn_up.weight");
  try {
    (void)load(missing);
    FAIL() << "a missing tensor was accepted";
  } catch (const moe::Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.ffn_up.weight"), std::string::npos) << e.what();
  }
  const ReferenceModel m = load(qwen3moe(QwOpt{}));
  EXPECT_THROW((void)m.forward({40}), moe::Error);
}

}  // namespace
}  // namespace moe::testing
