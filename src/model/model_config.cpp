#include "model/model_config.h"

#include <cmath>

#include "core/error.h"
#include "model/gguf.h"

namespace moe {
namespace {

struct Reader {
  const GgufFile& f;
  std::string prefix;

  int64_t req(const char* key) const { return f.require_int(prefix + key); }
  int64_t opt(const char* key, int64_t fallback) const {
    return f.get_int(prefix + key).value_or(fallback);
  }
  float optf(const char* key, double fallback) const {
    return float(f.get_float(prefix + key).value_or(fallback));
  }
  void positive(const char* key, int64_t v, int64_t max = int64_t(1) << 24) const {
    if (v <= 0 || v > max) fail("{}: {}{} = {} is out of range (1..{})", f.path(), prefix, key, v, max);
  }
};

// YaRN magnitude of HF's yarn_get_mscale.
float yarn_mscale(float factor, float m) { return factor <= 1.0f ? 1.0f : 1.0f + 0.1f * m * std::log(factor); }

// RoPE settings as llama.cpp derives them for ggml_rope_ext. `log_mul` is the YaRN log
// multiplier as llama.cpp holds it (for deepseek2 the GGUF value / 0.1, i.e. HF's
// mscale_all_dim). ggml multiplies cos/sin by (1 + 0.1 ln(factor)) whenever YaRN is on;
// attn_factor is chosen so that the net rotation magnitude is what the model expects.
void read_rope(const Reader& r, ModelConfig& c, int64_t n_rot, float log_mul) {
  c.rope.n_rot = int(n_rot);
  c.rope.freq_base = r.optf("rope.freq_base", 10000.0);
  const float factor = r.optf("rope.scaling.factor", 0.0);
  const std::string scaling =
      r.f.get_string(r.prefix + "rope.scaling.type").value_or(factor > 0.0f ? "linear" : "none");
  c.rope.n_ctx_orig = int(r.opt("rope.scaling.original_context_length", c.n_ctx_train));
  c.rope.beta_fast = r.optf("rope.scaling.yarn_beta_fast", 32.0);
  c.rope.beta_slow = r.optf("rope.scaling.yarn_beta_slow", 1.0);
  if (scaling != "none" && scaling != "yarn" && scaling != "linear") {
    fail("{}: {}rope.scaling.type '{}' is not supported (none, linear, yarn)", r.f.path(), r.prefix, scaling);
  }
  if (scaling != "none" && factor > 0.0f) c.rope.freq_scale = 1.0f / factor;
  float a = 1.0f;
  if (scaling == "yarn") {
    c.rope.ext_factor = 1.0f;
    const float f = 1.0f / c.rope.freq_scale;
    if (log_mul != 0.0f) {
      const float m = (c.arch == Arch::Deepseek2 && log_mul != 1.0f) ? log_mul : 1.0f;
      a = yarn_mscale(f, m) / yarn_mscale(f, log_mul);
    } else {
      a = yarn_mscale(f, 1.0f);
    }
    a /= 1.0f + 0.1f * std::log(f);
  }
  c.rope.attn_factor = a * r.optf("rope.scaling.attn_factor", 1.0);
}

void read_deepseek2(const Reader& r, ModelConfig& c) {
  c.rope_style = RopeStyle::Interleaved;
  c.q_lora_rank = r.opt("attention.q_lora_rank", 0);
  c.kv_lora_rank = r.req("attention.kv_lora_rank");
  r.positive("attention.kv_lora_rank", c.kv_lora_rank);
  c.qk_rope_dim = r.req("rope.dimension_count");
  r.positive("rope.dimension_count", c.qk_rope_dim);
  // Files converted with the split attn_k_b/attn_v_b (MLA) store the per-head dims under
  // *_mla and the latent sizes under key_length/value_length; older files only the former.
  const int64_t key_len = r.opt("attention.key_length_mla", r.req("attention.key_length"));
  c.v_head_dim = r.opt("attention.value_length_mla", r.req("attention.value_length"));
  c.qk_nope_dim = key_len - c.qk_rope_dim;
  r.positive("attention.key_length (minus rope dims)", c.qk_nope_dim);
  r.positive("attention.value_length", c.v_head_dim);
  c.n_dense_lead = r.opt("leading_dense_block_count", 0);
  if (c.n_dense_lead < 0 || c.n_dense_lead > c.n_layer) {
    fail("{}: {}leading_dense_block_count = {} is out of range", r.f.path(), r.prefix, c.n_dense_lead);
  }
  c.n_ff_dense = r.opt("feed_forward_length", 0);
  c.n_shared_experts = r.opt("expert_shared_count", 0);
  c.n_ff_expert = r.req("expert_feed_forward_length");
  c.gating.n_experts = int(r.req("expert_count"));
  c.gating.n_used = int(r.req("expert_used_count"));
  c.gating.scale = r.optf("expert_weights_scale", 0.0);
  c.gating.normalize = r.f.get_bool(r.prefix + "expert_weights_norm").value_or(false);
  const int64_t func = r.opt("expert_gating_func", 1);
  if (func != 1 && func != 2) {
    fail("{}: {}expert_gating_func = {} is not supported (1 softmax, 2 sigmoid)", r.f.path(), r.prefix, func);
  }
  c.gating.func = func == 2 ? GatingFunc::Sigmoid : GatingFunc::Softmax;
  c.gating.n_group = int(r.opt("expert_group_count", 1));
  c.gating.topk_group = int(r.opt("expert_group_used_count", c.gating.n_group));
  // The converter stores 0.1 * mscale_all_dim; llama.cpp undoes the 0.1.
  const float log_mul = r.optf("rope.scaling.yarn_log_multiplier", 0.0) / 0.1f;
  read_rope(r, c, c.qk_rope_dim, log_mul);
  // Attention logits carry YaRN's mscale squared (llama.cpp's kq_scale for deepseek2).
  const float ln_f = std::log(1.0f / c.rope.freq_scale);
  const float attn_factor_org = c.rope.attn_factor * (1.0f + 0.1f * ln_f);
  const float mscale = attn_factor_org * (1.0f + 0.1f * log_mul * ln_f);
  c.kq_scale = mscale * mscale / std::sqrt(float(key_len));
}

void read_qwen3moe(const Reader& r, ModelConfig& c) {
  c.rope_style = RopeStyle::Neox;
  c.n_head_kv = r.opt("attention.head_count_kv", c.n_head);
  r.positive("attention.head_count_kv", c.n_head_kv);
  if (c.n_head % c.n_head_kv != 0) {
    fail("{}: attention.head_count {} is not a multiple of head_count_kv {}", r.f.path(), c.n_head, c.n_head_kv);
  }
  c.head_dim = r.opt("attention.key_length", c.n_embd / c.n_head);
  r.positive("attention.key_length", c.head_dim);
  const int64_t v_len = r.opt("attention.value_length", c.head_dim);
  if (v_len != c.head_dim) fail("{}: qwen3moe needs value_length == key_length", r.f.path());
  c.n_ff_expert = r.req("expert_feed_forward_length");
  c.gating.n_experts = int(r.req("expert_count"));
  c.gating.n_used = int(r.req("expert_used_count"));
  c.gating.func = GatingFunc::Softmax;
  c.gating.normalize = true;
  c.gating.scale = r.optf("expert_weights_scale", 0.0);
  read_rope(r, c, r.opt("rope.dimension_count", c.head_dim), r.optf("rope.scaling.yarn_log_multiplier", 0.0));
  c.kq_scale = 1.0f / std::sqrt(float(c.head_dim));
}

}  // namespace

int64_t ModelConfig::kv_row_floats() const {
  return arch == Arch::Deepseek2 ? kv_lora_rank + qk_rope_dim : 2 * n_head_kv * head_dim;
}

KvRowFormat ModelConfig::kv_row_format(KvDtype dtype) const {
  if (arch == Arch::Deepseek2) return KvRowFormat(dtype, {kv_lora_rank, qk_rope_dim});
  return KvRowFormat(dtype, std::vector<int64_t>(size_t(2 * n_head_kv), head_dim));
}

ModelConfig ModelConfig::from_gguf(const GgufFile& f) {
  ModelConfig c;
  c.arch_name = f.require_string("general.architecture");
  c.name = f.get_string("general.name").value_or("");
  if (c.arch_name == "deepseek2") {
    c.arch = Arch::Deepseek2;
  } else if (c.arch_name == "qwen3moe") {
    c.arch = Arch::Qwen3Moe;
  } else {
    fail("{}: architecture '{}' is not supported (deepseek2, qwen3moe)", f.path(), c.arch_name);
  }
  const Reader r{f, c.arch_name + "."};
  c.n_embd = r.req("embedding_length");
  r.positive("embedding_length", c.n_embd);
  c.n_layer = r.req("block_count");
  r.positive("block_count", c.n_layer, 4096);
  c.n_nextn = r.opt("nextn_predict_layers", 0);
  if (c.n_nextn < 0 || c.n_nextn >= c.n_layer) {
    fail("{}: {}nextn_predict_layers = {} must be in [0, block_count = {})", f.path(), r.prefix, c.n_nextn, c.n_layer);
  }
  if (c.n_nextn > 1) fail("{}: {} MTP layers: moengine reads files with at most one (nextn_predict_layers)", f.path(), c.n_nextn);
  if (c.n_nextn > 0 && c.arch_name != "deepseek2") fail("{}: MTP layers (nextn_predict_layers) are read for deepseek2 only", f.path());
  c.n_layer -= c.n_nextn;
  c.n_head = r.req("attention.head_count");
  r.positive("attention.head_count", c.n_head, 4096);
  c.n_ctx_train = r.opt("context_length", 4096);
  c.rms_eps = r.optf("attention.layer_norm_rms_epsilon", 1e-6);
  if (c.arch == Arch::Deepseek2) {
    read_deepseek2(r, c);
  } else {
    read_qwen3moe(r, c);
  }
  const auto& g = c.gating;
  if (g.n_experts <= 0 || g.n_used <= 0 || g.n_used > g.n_experts) {
    fail("{}: expert_used_count {} must be in 1..expert_count {}", f.path(), g.n_used, g.n_experts);
  }
  if (g.n_group < 1 || g.n_experts % g.n_group != 0 || g.topk_group < 1 || g.topk_group > g.n_group ||
      g.n_group > 64 || g.n_used > g.topk_group * (g.n_experts / g.n_group)) {
    fail("{}: expert groups ({} groups, {} used) do not fit {} experts with {} used", f.path(), g.n_group,
         g.topk_group, g.n_experts, g.n_used);
  }
  if (c.rope.n_rot % 2 != 0) fail("{}: rope dimension {} must be even", f.path(), c.rope.n_rot);
  if (const GgufArray* tokens = f.get_array("tokenizer.ggml.tokens")) c.n_vocab = int64_t(tokens->size());
  c.bos_id = int32_t(f.get_int("tokenizer.ggml.bos_token_id").value_or(-1));
  c.eos_id = int32_t(f.get_int("tokenizer.ggml.eos_token_id").value_or(-1));
  return c;
}

std::string ModelConfig::summary() const {
  std::string s = fmt::format("{} {}: {} layers, hidden {}, {} heads", arch_name, name.empty() ? "" : "'" + name + "'",
                              n_layer, n_embd, n_head);
  if (arch == Arch::Deepseek2) {
    s += fmt::format(", MLA (q_lora {}, kv_lora {}, nope {}, rope {}, v {}), {} dense layers", q_lora_rank,
                     kv_lora_rank, qk_nope_dim, qk_rope_dim, v_head_dim, n_dense_lead);
  } else {
    s += fmt::format(", GQA {} kv heads x {}", n_head_kv, head_dim);
  }
  s += fmt::format(", {} experts top-{} (ffn {})", gating.n_experts, gating.n_used, n_ff_expert);
  if (n_shared_experts) s += fmt::format(" + {} shared", n_shared_experts);
  s += fmt::format(", vocab {}", n_vocab);
  if (n_nextn > 0) s += fmt::format(", {} MTP layer", n_nextn);
  return s;
}

}  // namespace moe
