// Plain reference forward pass; see docs/architectures.md for every convention used here.
#include "support/reference_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <numeric>
#include <optional>

#include <fmt/ranges.h>

#include "core/error.h"
#include "kernels/ggml_type.h"
#include "kernels/quant.h"
#include "model/gguf.h"

namespace moe::testing {
namespace {

using Vec = std::vector<double>;

// A weight dequantized to f32, dims in GGUF order (ne[0] contiguous).
struct Tensor {
  std::vector<int64_t> ne;
  std::vector<float> data;
  bool empty() const { return data.empty(); }
  int64_t dim(size_t i) const { return i < ne.size() ? ne[i] : 1; }
};

// y = W x for the matrix `slice` of W (ne = [n_in, n_out, n_slices]).
Vec matvec(const Tensor& w, const double* x, int64_t slice = 0) {
  const int64_t n_in = w.dim(0), n_out = w.dim(1);
  const float* base = w.data.data() + slice * n_in * n_out;
  Vec y(size_t(n_out), 0.0);
  for (int64_t o = 0; o < n_out; ++o) {
    const float* row = base + o * n_in;
    double acc = 0.0;
    for (int64_t i = 0; i < n_in; ++i) acc += double(row[i]) * x[i];
    y[size_t(o)] = acc;
  }
  return y;
}
Vec matvec(const Tensor& w, const Vec& x, int64_t slice = 0) { return matvec(w, x.data(), slice); }

// x / sqrt(mean(x^2) + eps) * w, over n values starting at x.
void rmsnorm_inplace(double* x, int64_t n, const Tensor& w, double eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double inv = 1.0 / std::sqrt(ss / double(n) + eps);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * inv * double(w.data[size_t(i)]);
}
Vec rmsnorm(const Vec& x, const Tensor& w, double eps) {
  Vec y = x;
  rmsnorm_inplace(y.data(), int64_t(y.size()), w, eps);
  return y;
}

double silu(double x) { return x / (1.0 + std::exp(-x)); }

// down( silu(gate x) * up x ) with matrix `slice` of each stack.
Vec swiglu(const Tensor& gate, const Tensor& up, const Tensor& down, const Vec& x, int64_t slice = 0) {
  Vec g = matvec(gate, x, slice);
  const Vec u = matvec(up, x, slice);
  for (size_t i = 0; i < g.size(); ++i) g[i] = silu(g[i]) * u[i];
  return matvec(down, g, slice);
}

// ggml's rope_yarn, NORMAL (adjacent pairs) or NEOX (halves) layout.
struct Rope {
  int64_t n_rot = 0;
  bool neox = false;
  double base = 10000.0;
  double freq_scale = 1.0;
  double ext_factor = 0.0;
  double magnitude = 1.0;  // what cos/sin are multiplied by (incl. ggml's YaRN factor)
  double corr_low = 0.0, corr_high = 0.0;

  void apply(double* x, int64_t pos) const {
    for (int64_t i = 0; i < n_rot / 2; ++i) {
      const double theta_extrap = double(pos) * std::pow(base, -2.0 * double(i) / double(n_rot));
      const double theta_interp = freq_scale * theta_extrap;
      double theta = theta_interp;
      if (ext_factor != 0.0) {
        const double y = (double(i) - corr_low) / std::max(0.001, corr_high - corr_low);
        const double ramp = 1.0 - std::min(1.0, std::max(0.0, y));
        const double mix = ramp * ext_factor;
        theta = theta_interp * (1.0 - mix) + theta_extrap * mix;
      }
      const double c = std::cos(theta) * magnitude, s = std::sin(theta) * magnitude;
      const int64_t a = neox ? i : 2 * i;
      const int64_t b = neox ? i + n_rot / 2 : 2 * i + 1;
      const double x0 = x[a], x1 = x[b];
      x[a] = x0 * c - x1 * s;
      x[b] = x0 * s + x1 * c;
    }
  }
};

struct Layer {
  int64_t n_head = 0, n_head_kv = 0;
  Tensor attn_norm, ffn_norm, wo;
  // deepseek2 (MLA)
  Tensor wq, wq_a, q_a_norm, wq_b, wkv_a, kv_a_norm, wkv_b, wk_b, wv_b;
  // qwen3moe
  Tensor wk, wv, q_norm, k_norm;
  // dense FFN
  bool dense = false;
  Tensor ffn_gate, ffn_up, ffn_down;
  // MoE
  Tensor gate_inp, exp_bias, gate_exps, up_exps, down_exps;
  Tensor gate_sh, up_sh, down_sh;
};

enum class Gating { Softmax, Sigmoid };

}  // namespace

struct ReferenceModel::Impl {
  std::string path, arch;
  bool ds2 = false;
  int64_t n_vocab = 0, n_embd = 0, n_layer = 0;
  double eps = 1e-6;
  Rope rope;
  double kq_scale = 1.0;
  // deepseek2
  int64_t q_lora = 0, r_kv = 0, d_qk = 0, d_v = 0, d_rope = 0, d_nope = 0;
  // qwen3moe
  int64_t head_dim = 0;
  // MoE
  int64_t n_expert = 0, n_used = 0, n_ff_exp = 0, n_shared = 0, n_dense_lead = 0;
  int64_t n_group = 1, n_group_used = 1;
  Gating gating = Gating::Softmax;
  bool norm_w = false;
  double w_scale = 0.0;

  Tensor tok_embd, output_norm, output;
  std::vector<Layer> layers;

  void load(const GgufFile& f);
  Vec moe(const Layer& L, const Vec& x) const;
  std::vector<Vec> attn_mla(const Layer& L, const std::vector<Vec>& xs) const;
  std::vector<Vec> attn_gqa(const Layer& L, const std::vector<Vec>& xs) const;
};

namespace {

// Metadata and tensor access with errors that name the file, the key and the tensor.
class Reader {
 public:
  Reader(const GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}

  std::string key(std::string_view k) const { return arch_ + "." + std::string(k); }
  bool has(std::string_view k) const { return f_.has(key(k)); }
  int64_t req_int(std::string_view k) const { return f_.require_int(key(k)); }
  int64_t opt_int(std::string_view k, int64_t def) const { return f_.get_int(key(k)).value_or(def); }
  double opt_float(std::string_view k, double def) const { return f_.get_float(key(k)).value_or(def); }
  bool opt_bool(std::string_view k, bool def) const { return f_.get_bool(key(k)).value_or(def); }
  std::optional<std::string> opt_string(std::string_view k) const { return f_.get_string(key(k)); }

  // An integer that may also be stored as one value per layer.
  int64_t layer_int(std::string_view k, int64_t il, std::optional<int64_t> def) const {
    const GgufValue* v = f_.find(key(k));
    if (v == nullptr) {
      if (!def) fail("{}: missing metadata key {}", f_.path(), key(k));
      return *def;
    }
    if (v->type == GgufValueType::ARRAY) {
      const auto& a = std::get<GgufArray>(v->value);
      if (a.ints.size() <= size_t(il)) fail("{}: {} has no value for layer {}", f_.path(), key(k), il);
      return a.ints[size_t(il)];
    }
    return *f_.get_int(key(k));
  }

  bool has_tensor(const std::string& name) const { return f_.find_tensor(name) != nullptr; }

  // The tensor `name` dequantized to f32; its dims must be `ne` (trailing 1s ignored).
  Tensor tensor(const std::string& name, const std::vector<int64_t>& ne) const {
    const GgufTensorInfo* t = f_.find_tensor(name);
    if (t == nullptr) fail("{}: missing tensor {}", f_.path(), name);
    auto trim = [](std::vector<int64_t> v) {
      while (!v.empty() && v.back() == 1) v.pop_back();
      return v;
    };
    if (trim(t->ne) != trim(ne)) {
      fail("{}: tensor {} has shape [{}], expected [{}]", f_.path(), name, fmt::join(t->ne, ", "),
           fmt::join(ne, ", "));
    }
    return read(*t);
  }
  Tensor opt_tensor(const std::string& name, const std::vector<int64_t>& ne) const {
    return has_tensor(name) ? tensor(name, ne) : Tensor{};
  }

 private:
  Tensor read(const GgufTensorInfo& t) const {
    Tensor out;
    out.ne = t.ne;
    const int64_t n = t.n_elements();
    const int64_t ne0 = t.ne.empty() ? 1 : t.ne[0];
    const auto& tr = traits(t.type);
    if (ne0 <= 0 || ne0 % tr.block_size != 0) {
      fail("{}: tensor {} row of {} is not a multiple of the {} block size", f_.path(), t.name, ne0,
           tr.name);
    }
    out.data.resize(size_t(n));
    for (int64_t r = 0; r < n / ne0; ++r) {
      float* dst = out.data.data() + r * ne0;
      if (t.type == GgmlType::F32) {
        std::memcpy(dst, t.row(r), size_t(ne0) * sizeof(float));
      } else {
        dequantize_row(t.type, t.row(r), dst, ne0);
      }
    }
    return out;
  }

  const GgufFile& f_;
  std::string arch_;
};

std::string blk(int64_t il, const char* name) { return fmt::format("blk.{}.{}", il, name); }

}  // namespace

void ReferenceModel::Impl::load(const GgufFile& f) {
  path = f.path();
  arch = f.require_string("general.architecture");
  if (arch != "deepseek2" && arch != "qwen3moe") {
    fail("{}: architecture '{}' is not supported by the reference model", path, arch);
  }
  ds2 = arch == "deepseek2";
  const Reader r(f, arch);

  n_layer = r.req_int("block_count");
  n_embd = r.req_int("embedding_length");
  eps = f.require_float(r.key("attention.layer_norm_rms_epsilon"));
  if (n_layer <= 0 || n_embd <= 0) fail("{}: block_count and embedding_length must be positive", path);

  const int64_t n_head0 = r.layer_int("attention.head_count", 0, std::nullopt);
  const int64_t key_length = r.opt_int("attention.key_length", n_embd / std::max<int64_t>(1, n_head0));
  const int64_t value_length = r.opt_int("attention.value_length", n_embd / std::max<int64_t>(1, n_head0));

  // --- MoE hyper-parameters -------------------------------------------------------------
  n_expert = r.opt_int("expert_count", 0);
  n_used = r.opt_int("expert_used_count", 0);
  n_group = std::max<int64_t>(1, r.opt_int("expert_group_count", 1));
  n_group_used = r.opt_int("expert_group_used_count", n_group);
  w_scale = r.opt_float("expert_weights_scale", 0.0);
  if (n_expert <= 0 || n_used <= 0 || n_used > n_expert) {
    fail("{}: expert_count {} / expert_used_count {} are not a valid MoE setup", path, n_expert, n_used);
  }
  if (n_expert % n_group != 0 || n_group_used < 1 || n_group_used > n_group ||
      n_used > n_group_used * (n_expert / n_group)) {
    fail("{}: expert groups {} / used {} do not fit {} experts, {} used", path, n_group, n_group_used,
         n_expert, n_used);
  }

  // --- attention and RoPE hyper-parameters -----------------------------------------------
  const int64_t n_rot_default = ds2 ? -1 : key_length;
  int64_t n_rot = r.opt_int("rope.dimension_count", n_rot_default);
  if (n_rot < 0) fail("{}: missing {}", path, r.key("rope.dimension_count"));
  if (ds2) {
    q_lora = r.opt_int("attention.q_lora_rank", 0);
    r_kv = r.req_int("attention.kv_lora_rank");
    d_rope = n_rot;
    const int64_t k_mla = r.opt_int("attention.key_length_mla", 0);
    const int64_t v_mla = r.opt_int("attention.value_length_mla", 0);
    const bool split = k_mla > 0 && v_mla > 0;
    d_qk = split ? k_mla : key_length;
    d_v = split ? v_mla : value_length;
    d_nope = d_qk - d_rope;
    if (d_nope < 1 || d_v < 1 || r_kv < 1 || d_rope % 2 != 0) {
      fail("{}: inconsistent MLA sizes: q/k head {}, rope {}, v head {}, kv_lora_rank {}", path, d_qk,
           d_rope, d_v, r_kv);
    }
    n_dense_lead = r.opt_int("leading_dense_block_count", 0);
    n_shared = r.opt_int("expert_shared_count", 0);
    n_ff_exp = r.req_int("expert_feed_forward_length");
    norm_w = r.opt_bool("expert_weights_norm", false);
    const int64_t gf = r.opt_int("expert_gating_func", 0);
    if (gf == 0 || gf == 1) {
      gating = Gating::Softmax;
    } else if (gf == 2) {
      gating = Gating::Sigmoid;
    } else {
      fail("{}: {} = {} is not supported (1 softmax, 2 sigmoid)", path, r.key("expert_gating_func"), gf);
    }
  } else {
    head_dim = key_length;
    if (value_length != head_dim || n_rot != head_dim || head_dim % 2 != 0) {
      fail("{}: qwen3moe needs key_length == value_length == rope.dimension_count (even), got {}, {}, {}",
           path, key_length, value_length, n_rot);
    }
    const int64_t n_ff = r.layer_int("feed_forward_length", 0, int64_t(0));
    n_ff_exp = r.opt_int("expert_feed_forward_length", 0);
    if (n_ff_exp == 0) n_ff_exp = n_ff / n_used;
    if (n_ff_exp <= 0) fail("{}: missing {}", path, r.key("expert_feed_forward_length"));
    norm_w = true;  // llama.cpp always renormalizes the selected weights for qwen3moe
    gating = Gating::Softmax;
  }

  // RoPE / YaRN (docs/architectures.md §3).
  const int64_t n_ctx_train = r.opt_int("context_length", 0);
  const std::string scaling = r.opt_string("rope.scaling.type").value_or("linear");
  if (scaling != "none" && scaling != "linear" && scaling != "yarn") {
    fail("{}: rope scaling type '{}' is not supported", path, scaling);
  }
  double factor = r.opt_float("rope.scaling.factor", 0.0);
  rope.n_rot = n_rot;
  rope.neox = !ds2;
  rope.base = r.opt_float("rope.freq_base", 10000.0);
  rope.freq_scale = (scaling == "none" || factor == 0.0) ? 1.0 : 1.0 / factor;
  rope.ext_factor = scaling == "yarn" ? 1.0 : 0.0;
  double yarn_log_mul = r.opt_float("rope.scaling.yarn_log_multiplier", 0.0);
  if (ds2) yarn_log_mul /= 0.1;  // the converter writes 0.1 * mscale_all_dim
  const double F = 1.0 / rope.freq_scale;
  double attn_factor = 1.0;  // llama.cpp's cparams.yarn_attn_factor
  if (rope.ext_factor != 0.0) {
    auto get_mscale = [](double scale, double m) { return scale <= 1.0 ? 1.0 : 1.0 + 0.1 * m * std::log(scale); };
    if (yarn_log_mul != 0.0) {
      const double m_all = yarn_log_mul;
      const double m = (ds2 && m_all != 1.0) ? m_all : 1.0;
      attn_factor = get_mscale(F, m) / get_mscale(F, m_all);
    } else {
      attn_factor = get_mscale(F, 1.0);
    }
    attn_factor /= 1.0 + 0.1 * std::log(F);
    const int64_t n_ctx_orig = r.opt_int("rope.scaling.original_context_length", n_ctx_train);
    if (n_ctx_orig <= 0) fail("{}: YaRN needs {}", path, r.key("rope.scaling.original_context_length"));
    const double beta_fast = r.opt_float("rope.scaling.yarn_beta_fast", 32.0);
    const double beta_slow = r.opt_float("rope.scaling.yarn_beta_slow", 1.0);
    auto corr_dim = [&](double beta) {
      return double(n_rot) * std::log(double(n_ctx_orig) / (beta * 2.0 * std::numbers::pi)) / (2.0 * std::log(rope.base));
    };
    rope.corr_low = std::max(0.0, std::floor(corr_dim(beta_fast)));
    rope.corr_high = std::min(double(n_rot - 1), std::ceil(corr_dim(beta_slow)));
  }
  attn_factor *= r.opt_float("rope.scaling.attn_factor", 1.0);
  rope.magnitude = attn_factor * (rope.ext_factor != 0.0 ? 1.0 + 0.1 * std::log(1.0 / rope.freq_scale) : 1.0);
  if (ds2) {
    const double attn_factor_org = attn_factor * (1.0 + 0.1 * std::log(1.0 / rope.freq_scale));
    const double mscale = attn_factor_org * (1.0 + 0.1 * yarn_log_mul * std::log(1.0 / rope.freq_scale));
    kq_scale = mscale * mscale / std::sqrt(double(d_qk));
  } else {
    kq_scale = 1.0 / std::sqrt(double(head_dim));
  }

  // --- tensors ---------------------------------------------------------------------------
  const GgufTensorInfo* embd_info = f.find_tensor("token_embd.weight");
  if (embd_info == nullptr || embd_info->ne.size() < 2) fail("{}: missing 2-D tensor token_embd.weight", path);
  tok_embd = r.tensor("token_embd.weight", {n_embd, embd_info->ne[1]});
  n_vocab = tok_embd.dim(1);
  output_norm = r.tensor("output_norm.weight", {n_embd});
  output = r.opt_tensor("output.weight", {n_embd, n_vocab});
  if (output.empty()) output = tok_embd;  // tied embeddings

  layers.resize(size_t(n_layer));
  for (int64_t il = 0; il < n_layer; ++il) {
    Layer& L = layers[size_t(il)];
    L.n_head = r.layer_int("attention.head_count", il, std::nullopt);
    L.n_head_kv = r.layer_int("attention.head_count_kv", il, L.n_head);
    if (L.n_head <= 0) fail("{}: layer {} has no attention heads", path, il);
    L.attn_norm = r.tensor(blk(il, "attn_norm.weight"), {n_embd});
    L.ffn_norm = r.tensor(blk(il, "ffn_norm.weight"), {n_embd});
    const int64_t H = L.n_head;
    if (ds2) {
      if (q_lora > 0) {
        L.wq_a = r.tensor(blk(il, "attn_q_a.weight"), {n_embd, q_lora});
        L.q_a_norm = r.tensor(blk(il, "attn_q_a_norm.weight"), {q_lora});
        L.wq_b = r.tensor(blk(il, "attn_q_b.weight"), {q_lora, H * d_qk});
      } else {
        L.wq = r.tensor(blk(il, "attn_q.weight"), {n_embd, H * d_qk});
      }
      L.wkv_a = r.tensor(blk(il, "attn_kv_a_mqa.weight"), {n_embd, r_kv + d_rope});
      L.kv_a_norm = r.tensor(blk(il, "attn_kv_a_norm.weight"), {r_kv});
      const bool split_keys = r.opt_int("attention.key_length_mla", 0) > 0;
      const bool have_split = r.has_tensor(blk(il, "attn_k_b.weight")) && r.has_tensor(blk(il, "attn_v_b.weight"));
      const bool have_kvb = r.has_tensor(blk(il, "attn_kv_b.weight"));
      if (have_split && (split_keys || !have_kvb)) {
        L.wk_b = r.tensor(blk(il, "attn_k_b.weight"), {d_nope, r_kv, H});
        L.wv_b = r.tensor(blk(il, "attn_v_b.weight"), {r_kv, d_v, H});
      } else {
        L.wkv_b = r.tensor(blk(il, "attn_kv_b.weight"), {r_kv, H * (d_nope + d_v)});
      }
      L.wo = r.tensor(blk(il, "attn_output.weight"), {H * d_v, n_embd});
    } else {
      if (L.n_head_kv <= 0 || H % L.n_head_kv != 0) {
        fail("{}: layer {}: {} heads do not group onto {} kv heads", path, il, H, L.n_head_kv);
      }
      L.wq = r.tensor(blk(il, "attn_q.weight"), {n_embd, H * head_dim});
      L.wk = r.tensor(blk(il, "attn_k.weight"), {n_embd, L.n_head_kv * head_dim});
      L.wv = r.tensor(blk(il, "attn_v.weight"), {n_embd, L.n_head_kv * head_dim});
      L.q_norm = r.tensor(blk(il, "attn_q_norm.weight"), {head_dim});
      L.k_norm = r.tensor(blk(il, "attn_k_norm.weight"), {head_dim});
      L.wo = r.tensor(blk(il, "attn_output.weight"), {H * head_dim, n_embd});
    }

    L.dense = ds2 && il < n_dense_lead;
    if (L.dense) {
      int64_t n_ff = r.layer_int("feed_forward_length", il, int64_t(0));
      if (n_ff == 0 && r.has_tensor(blk(il, "ffn_gate.weight"))) n_ff = f.find_tensor(blk(il, "ffn_gate.weight"))->ne.at(1);
      L.ffn_gate = r.tensor(blk(il, "ffn_gate.weight"), {n_embd, n_ff});
      L.ffn_up = r.tensor(blk(il, "ffn_up.weight"), {n_embd, n_ff});
      L.ffn_down = r.tensor(blk(il, "ffn_down.weight"), {n_ff, n_embd});
      continue;
    }
    L.gate_inp = r.tensor(blk(il, "ffn_gate_inp.weight"), {n_embd, n_expert});
    if (ds2) L.exp_bias = r.opt_tensor(blk(il, "exp_probs_b.bias"), {n_expert});
    if (r.has_tensor(blk(il, "ffn_gate_exps.weight")) || !r.has_tensor(blk(il, "ffn_gate_up_exps.weight"))) {
      L.gate_exps = r.tensor(blk(il, "ffn_gate_exps.weight"), {n_embd, n_ff_exp, n_expert});
      L.up_exps = r.tensor(blk(il, "ffn_up_exps.weight"), {n_embd, n_ff_exp, n_expert});
    } else {  // merged form: per expert, n_ff_exp gate rows then n_ff_exp up rows
      const Tensor gu = r.tensor(blk(il, "ffn_gate_up_exps.weight"), {n_embd, 2 * n_ff_exp, n_expert});
      const size_t half = size_t(n_embd * n_ff_exp);
      L.gate_exps.ne = L.up_exps.ne = {n_embd, n_ff_exp, n_expert};
      for (int64_t e = 0; e < n_expert; ++e) {
        const float* src = gu.data.data() + size_t(e) * 2 * half;
        L.gate_exps.data.insert(L.gate_exps.data.end(), src, src + half);
        L.up_exps.data.insert(L.up_exps.data.end(), src + half, src + 2 * half);
      }
    }
    L.down_exps = r.tensor(blk(il, "ffn_down_exps.weight"), {n_ff_exp, n_embd, n_expert});
    if (ds2 && n_shared > 0) {
      const int64_t n_sh = n_ff_exp * n_shared;
      L.gate_sh = r.tensor(blk(il, "ffn_gate_shexp.weight"), {n_embd, n_sh});
      L.up_sh = r.tensor(blk(il, "ffn_up_shexp.weight"), {n_embd, n_sh});
      L.down_sh = r.tensor(blk(il, "ffn_down_shexp.weight"), {n_sh, n_embd});
    }
  }
}

// Gating, expert selection and the weighted sum of the chosen experts (docs §4).
Vec ReferenceModel::Impl::moe(const Layer& L, const Vec& x) const {
  const Vec logits = matvec(L.gate_inp, x);
  Vec s(static_cast<size_t>(n_expert));
  if (gating == Gating::Softmax) {
    const double mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0.0;
    for (int64_t e = 0; e < n_expert; ++e) sum += (s[size_t(e)] = std::exp(logits[size_t(e)] - mx));
    for (double& v : s) v /= sum;
  } else {
    for (int64_t e = 0; e < n_expert; ++e) s[size_t(e)] = 1.0 / (1.0 + std::exp(-logits[size_t(e)]));
  }
  Vec sel = s;  // the bias only steers the choice, never the weights
  if (!L.exp_bias.empty()) {
    for (int64_t e = 0; e < n_expert; ++e) sel[size_t(e)] += double(L.exp_bias.data[size_t(e)]);
  }
  // Indices of `v` sorted by value, largest first (ties: lower index first).
  auto order = [](const Vec& v) {
    std::vector<int64_t> idx(v.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return v[size_t(a)] > v[size_t(b)]; });
    return idx;
  };
  if (n_group > 1) {
    const int64_t per = n_expert / n_group;
    Vec gscore(static_cast<size_t>(n_group));
    for (int64_t g = 0; g < n_group; ++g) {
      Vec members(sel.begin() + g * per, sel.begin() + (g + 1) * per);
      std::sort(members.begin(), members.end(), std::greater<>());
      if (gating == Gating::Sigmoid) {  // DeepSeek-V3 noaux_tc: sum of the two best
        gscore[size_t(g)] = members[0] + (per > 1 ? members[1] : 0.0);
      } else {  // DeepSeek-V2 group_limited_greedy: the best one
        gscore[size_t(g)] = members[0];
      }
    }
    const std::vector<int64_t> gorder = order(gscore);
    std::vector<bool> keep(size_t(n_group), false);
    for (int64_t i = 0; i < n_group_used; ++i) keep[size_t(gorder[size_t(i)])] = true;
    for (int64_t e = 0; e < n_expert; ++e) {
      if (!keep[size_t(e / per)]) sel[size_t(e)] = -std::numeric_limits<double>::infinity();
    }
  }
  const std::vector<int64_t> ranked = order(sel);
  const std::vector<int64_t> chosen(ranked.begin(), ranked.begin() + n_used);
  Vec w(static_cast<size_t>(n_used));
  for (int64_t i = 0; i < n_used; ++i) w[size_t(i)] = s[size_t(chosen[size_t(i)])];
  if (norm_w) {
    const double sum = std::max(std::accumulate(w.begin(), w.end(), 0.0), 6.103515625e-5);
    for (double& v : w) v /= sum;
  }
  if (w_scale != 0.0 && w_scale != 1.0) {
    for (double& v : w) v *= w_scale;
  }
  Vec out(size_t(n_embd), 0.0);
  for (int64_t i = 0; i < n_used; ++i) {
    const Vec y = swiglu(L.gate_exps, L.up_exps, L.down_exps, x, chosen[size_t(i)]);
    for (int64_t d = 0; d < n_embd; ++d) out[size_t(d)] += w[size_t(i)] * y[size_t(d)];
  }
  return out;
}

namespace {

// Causal softmax attention of one head: q[t], k[t], v[t] are pointers per position.
void attend(const std::vector<const double*>& q, const std::vector<const double*>& k,
            const std::vector<const double*>& v, int64_t d_k, int64_t d_v, double scale,
            std::vector<double*>& out) {
  const size_t T = q.size();
  Vec p;
  for (size_t t = 0; t < T; ++t) {
    p.assign(t + 1, 0.0);
    double mx = -std::numeric_limits<double>::infinity();
    for (size_t j = 0; j <= t; ++j) {
      double dot = 0.0;
      for (int64_t i = 0; i < d_k; ++i) dot += q[t][i] * k[j][i];
      p[j] = scale * dot;
      mx = std::max(mx, p[j]);
    }
    double sum = 0.0;
    for (size_t j = 0; j <= t; ++j) sum += (p[j] = std::exp(p[j] - mx));
    for (int64_t i = 0; i < d_v; ++i) out[t][i] = 0.0;
    for (size_t j = 0; j <= t; ++j) {
      const double pj = p[j] / sum;
      for (int64_t i = 0; i < d_v; ++i) out[t][i] += pj * v[j][i];
    }
  }
}

}  // namespace

// MLA in its plain form: per head K = [k_nope(c) | k_pe], V = v(c) (docs §1).
std::vector<Vec> ReferenceModel::Impl::attn_mla(const Layer& L, const std::vector<Vec>& xs) const {
  const size_t T = xs.size();
  const int64_t H = L.n_head;
  std::vector<Vec> Q(T), K(T), V(T), O(T);
  for (size_t t = 0; t < T; ++t) {
    const Vec& x = xs[t];
    Vec q;
    if (q_lora > 0) {
      Vec qa = matvec(L.wq_a, x);
      rmsnorm_inplace(qa.data(), q_lora, L.q_a_norm, eps);
      q = matvec(L.wq_b, qa);
    } else {
      q = matvec(L.wq, x);
    }
    const Vec a = matvec(L.wkv_a, x);
    Vec c(a.begin(), a.begin() + r_kv);
    rmsnorm_inplace(c.data(), r_kv, L.kv_a_norm, eps);
    Vec k_pe(a.begin() + r_kv, a.end());
    rope.apply(k_pe.data(), int64_t(t));
    for (int64_t h = 0; h < H; ++h) rope.apply(q.data() + h * d_qk + d_nope, int64_t(t));

    K[t].assign(size_t(H * d_qk), 0.0);
    V[t].assign(size_t(H * d_v), 0.0);
    for (int64_t h = 0; h < H; ++h) {
      double* kh = K[t].data() + h * d_qk;
      double* vh = V[t].data() + h * d_v;
      if (!L.wkv_b.empty()) {  // rows h*(d_nope+d_v) + [0, d_nope) are K, the next d_v are V
        for (int64_t j = 0; j < d_nope + d_v; ++j) {
          const float* row = L.wkv_b.data.data() + (h * (d_nope + d_v) + j) * r_kv;
          double acc = 0.0;
          for (int64_t i = 0; i < r_kv; ++i) acc += double(row[i]) * c[size_t(i)];
          if (j < d_nope) kh[j] = acc; else vh[j - d_nope] = acc;
        }
      } else {  // k_b (n, r, h) and v_b (r, d, h)
        for (int64_t n = 0; n < d_nope; ++n) {
          double acc = 0.0;
          for (int64_t i = 0; i < r_kv; ++i) acc += double(L.wk_b.data[size_t((h * r_kv + i) * d_nope + n)]) * c[size_t(i)];
          kh[n] = acc;
        }
        for (int64_t d = 0; d < d_v; ++d) {
          const float* row = L.wv_b.data.data() + (h * d_v + d) * r_kv;
          double acc = 0.0;
          for (int64_t i = 0; i < r_kv; ++i) acc += double(row[i]) * c[size_t(i)];
          vh[d] = acc;
        }
      }
      for (int64_t i = 0; i < d_rope; ++i) kh[d_nope + i] = k_pe[size_t(i)];
    }
    Q[t] = std::move(q);
    O[t].assign(size_t(H * d_v), 0.0);
  }
  for (int64_t h = 0; h < H; ++h) {
    std::vector<const double*> qp(T), kp(T), vp(T);
    std::vector<double*> op(T);
    for (size_t t = 0; t < T; ++t) {
      qp[t] = Q[t].data() + h * d_qk;
      kp[t] = K[t].data() + h * d_qk;
      vp[t] = V[t].data() + h * d_v;
      op[t] = O[t].data() + h * d_v;
    }
    attend(qp, kp, vp, d_qk, d_v, kq_scale, op);
  }
  std::vector<Vec> out(T);
  for (size_t t = 0; t < T; ++t) out[t] = matvec(L.wo, O[t]);
  return out;
}

// Grouped-query attention with per-head q/k RMSNorm before NEOX RoPE (docs §2).
std::vector<Vec> ReferenceModel::Impl::attn_gqa(const Layer& L, const std::vector<Vec>& xs) const {
  const size_t T = xs.size();
  const int64_t H = L.n_head, G = L.n_head_kv, hd = head_dim;
  std::vector<Vec> Q(T), K(T), V(T), O(T);
  for (size_t t = 0; t < T; ++t) {
    Q[t] = matvec(L.wq, xs[t]);
    K[t] = matvec(L.wk, xs[t]);
    V[t] = matvec(L.wv, xs[t]);
    for (int64_t h = 0; h < H; ++h) {
      rmsnorm_inplace(Q[t].data() + h * hd, hd, L.q_norm, eps);
      rope.apply(Q[t].data() + h * hd, int64_t(t));
    }
    for (int64_t g = 0; g < G; ++g) {
      rmsnorm_inplace(K[t].data() + g * hd, hd, L.k_norm, eps);
      rope.apply(K[t].data() + g * hd, int64_t(t));
    }
    O[t].assign(size_t(H * hd), 0.0);
  }
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / (H / G);
    std::vector<const double*> qp(T), kp(T), vp(T);
    std::vector<double*> op(T);
    for (size_t t = 0; t < T; ++t) {
      qp[t] = Q[t].data() + h * hd;
      kp[t] = K[t].data() + g * hd;
      vp[t] = V[t].data() + g * hd;
      op[t] = O[t].data() + h * hd;
    }
    attend(qp, kp, vp, hd, hd, kq_scale, op);
  }
  std::vector<Vec> out(T);
  for (size_t t = 0; t < T; ++t) out[t] = matvec(L.wo, O[t]);
  return out;
}

ReferenceModel::ReferenceModel(const GgufFile& file) : impl_(std::make_unique<Impl>()) { impl_->load(file); }
ReferenceModel::~ReferenceModel() = default;
ReferenceModel::ReferenceModel(ReferenceModel&&) noexcept = default;
ReferenceModel& ReferenceModel::operator=(ReferenceModel&&) noexcept = default;

int64_t ReferenceModel::n_vocab() const { return impl_->n_vocab; }
int64_t ReferenceModel::n_embd() const { return impl_->n_embd; }
int64_t ReferenceModel::n_layer() const { return impl_->n_layer; }
const std::string& ReferenceModel::architecture() const { return impl_->arch; }
double ReferenceModel::kq_scale() const { return impl_->kq_scale; }
double ReferenceModel::rope_magnitude() const { return impl_->rope.magnitude; }

std::vector<float> ReferenceModel::forward(const std::vector<int32_t>& tokens) const {
  const Impl& m = *impl_;
  const size_t T = tokens.size();
  std::vector<Vec> h(T);
  for (size_t t = 0; t < T; ++t) {
    const int32_t id = tokens[t];
    if (id < 0 || id >= m.n_vocab) fail("{}: token id {} is outside the vocabulary of {}", m.path, id, m.n_vocab);
    const float* row = m.tok_embd.data.data() + int64_t(id) * m.n_embd;
    h[t].assign(row, row + m.n_embd);
  }
  for (const Layer& L : m.layers) {
    std::vector<Vec> xs(T);
    for (size_t t = 0; t < T; ++t) xs[t] = rmsnorm(h[t], L.attn_norm, m.eps);
    const std::vector<Vec> a = m.ds2 ? m.attn_mla(L, xs) : m.attn_gqa(L, xs);
    for (size_t t = 0; t < T; ++t) {
      for (int64_t d = 0; d < m.n_embd; ++d) h[t][size_t(d)] += a[t][size_t(d)];
      const Vec x = rmsnorm(h[t], L.ffn_norm, m.eps);
      Vec y;
      if (L.dense) {
        y = swiglu(L.ffn_gate, L.ffn_up, L.ffn_down, x);
      } else {
        y = m.moe(L, x);
        if (!L.gate_sh.empty()) {
          const Vec sh = swiglu(L.gate_sh, L.up_sh, L.down_sh, x);
          for (int64_t d = 0; d < m.n_embd; ++d) y[size_t(d)] += sh[size_t(d)];
        }
      }
      for (int64_t d = 0; d < m.n_embd; ++d) h[t][size_t(d)] += y[size_t(d)];
    }
  }
  std::vector<float> logits(T * size_t(m.n_vocab));
  for (size_t t = 0; t < T; ++t) {
    const Vec z = matvec(m.output, rmsnorm(h[t], m.output_norm, m.eps));
    for (int64_t v = 0; v < m.n_vocab; ++v) logits[t * size_t(m.n_vocab) + size_t(v)] = float(z[size_t(v)]);
  }
  return logits;
}

}  // namespace moe::testing
