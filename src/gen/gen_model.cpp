#include "gen/gen_model.h"

#include <cmath>
#include <memory>
#include <vector>

#include "core/error.h"
#include "checkpoint/hf_export.h"
#include "checkpoint/weight_format.h"
#include "core/thread_pool.h"
#include "gen/gen_random.h"
#include "gen/router_skew.h"
#include "kernels/quant.h"
#include "model/gguf.h"
#include "tokenizer/synthetic_vocab.h"

namespace moe {
namespace {

enum class Init { Norm, Matrix, Embedding, Output, Router, Bias };

struct GenTensor {
  std::string name;
  std::vector<int64_t> ne;
  Init init;
  int64_t layer = -1;  // the block a router or router bias belongs to
};

// One row of a tensor's values; rows are independent streams so they can be made in
// parallel and the file does not depend on the thread count.
void fill_row(const GenTensor& t, uint64_t seed, int64_t row, float* out) {
  uint64_t s = seed ^ gen::name_hash(t.name) ^ (uint64_t(row) * 0xd1b54a32d192ed03ull);
  const int64_t n = t.ne[0];
  const float fan_in = float(n);
  float scale = 0.0f, offset = 0.0f;
  switch (t.init) {
    case Init::Norm: scale = 0.1f; offset = 1.0f; break;
    case Init::Matrix: scale = std::sqrt(3.0f / fan_in); break;
    case Init::Embedding: scale = 1.0f; break;
    case Init::Output: scale = 3.0f * std::sqrt(3.0f / fan_in); break;
    case Init::Router: scale = 2.0f * std::sqrt(3.0f / fan_in); break;
    case Init::Bias: scale = 0.05f; break;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = offset + scale * gen::uniform_pm1(s);
}

bool ends_with(const std::string& s, const char* suffix) {
  const std::string x = suffix;
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

bool writes_residual(const GenTensor& t) {
  return t.name.find("attn_output") != std::string::npos || t.name.find("ffn_down") != std::string::npos;
}

bool is_residual_norm(const GenTensor& t) {
  return t.name == "output_norm.weight" || ends_with(t.name, ".attn_norm.weight") || ends_with(t.name, ".ffn_norm.weight");
}

// Skewed routing edits the embedding, the routers, the norms of the residual stream and the
// matrices that read or write it (see router_skew.h). A matrix with n_embd inputs that does
// not write the residual reads it: the attention's inner matrices have other widths.
void skew_row(const RouterSkew& skew, const GenTensor& t, int64_t n_embd, int64_t row, float* out) {
  switch (t.init) {
    case Init::Embedding: skew.edit_embedding_row(row, out); return;
    case Init::Router: skew.edit_router_row(t.layer, row, out); return;
    case Init::Bias: skew.edit_bias(t.layer, out); return;
    case Init::Norm:
      if (is_residual_norm(t)) skew.edit_norm_row(out);
      return;
    case Init::Matrix:
    case Init::Output:
      if (writes_residual(t)) skew.edit_writer_row(row % t.ne[1], out, t.ne[0]);
      else if (t.ne[0] == n_embd) skew.edit_reader_row(out);
      return;
  }
}

std::vector<GenTensor> tensor_list(const GenSpec& g) {
  std::vector<GenTensor> ts;
  ts.push_back({"token_embd.weight", {g.n_embd, g.n_vocab}, Init::Embedding});
  ts.push_back({"output_norm.weight", {g.n_embd}, Init::Norm});
  ts.push_back({"output.weight", {g.n_embd, g.n_vocab}, Init::Output});
  for (int64_t l = 0; l < g.n_layer + g.n_nextn; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    // An MTP layer routes like the last decoder layer under a skew (router_skew.h).
    const int64_t skew_layer = std::min(l, g.n_layer - 1);
    if (l >= g.n_layer) {
      ts.push_back({p + "nextn.eh_proj.weight", {2 * g.n_embd, g.n_embd}, Init::Matrix});
      ts.push_back({p + "nextn.enorm.weight", {g.n_embd}, Init::Norm});
      ts.push_back({p + "nextn.hnorm.weight", {g.n_embd}, Init::Norm});
      ts.push_back({p + "nextn.shared_head_norm.weight", {g.n_embd}, Init::Norm});
    }
    ts.push_back({p + "attn_norm.weight", {g.n_embd}, Init::Norm});
    if (g.arch == Arch::Deepseek2) {
      const int64_t qk = g.qk_nope_dim + g.qk_rope_dim;
      if (g.q_lora_rank > 0) {
        ts.push_back({p + "attn_q_a.weight", {g.n_embd, g.q_lora_rank}, Init::Matrix});
        ts.push_back({p + "attn_q_a_norm.weight", {g.q_lora_rank}, Init::Norm});
        ts.push_back({p + "attn_q_b.weight", {g.q_lora_rank, g.n_head * qk}, Init::Matrix});
      } else {
        ts.push_back({p + "attn_q.weight", {g.n_embd, g.n_head * qk}, Init::Matrix});
      }
      ts.push_back({p + "attn_kv_a_mqa.weight", {g.n_embd, g.kv_lora_rank + g.qk_rope_dim}, Init::Matrix});
      ts.push_back({p + "attn_kv_a_norm.weight", {g.kv_lora_rank}, Init::Norm});
      if (g.mla_split) {
        ts.push_back({p + "attn_k_b.weight", {g.qk_nope_dim, g.kv_lora_rank, g.n_head}, Init::Matrix});
        ts.push_back({p + "attn_v_b.weight", {g.kv_lora_rank, g.v_head_dim, g.n_head}, Init::Matrix});
      } else {
        ts.push_back({p + "attn_kv_b.weight", {g.kv_lora_rank, g.n_head * (g.qk_nope_dim + g.v_head_dim)}, Init::Matrix});
      }
      ts.push_back({p + "attn_output.weight", {g.n_head * g.v_head_dim, g.n_embd}, Init::Matrix});
    } else {
      ts.push_back({p + "attn_q.weight", {g.n_embd, g.n_head * g.head_dim}, Init::Matrix});
      ts.push_back({p + "attn_k.weight", {g.n_embd, g.n_head_kv * g.head_dim}, Init::Matrix});
      ts.push_back({p + "attn_v.weight", {g.n_embd, g.n_head_kv * g.head_dim}, Init::Matrix});
      ts.push_back({p + "attn_q_norm.weight", {g.head_dim}, Init::Norm});
      ts.push_back({p + "attn_k_norm.weight", {g.head_dim}, Init::Norm});
      ts.push_back({p + "attn_output.weight", {g.n_head * g.head_dim, g.n_embd}, Init::Matrix});
    }
    ts.push_back({p + "ffn_norm.weight", {g.n_embd}, Init::Norm});
    const bool dense = g.arch == Arch::Deepseek2 && l < g.n_dense_lead;
    if (dense) {
      ts.push_back({p + "ffn_gate.weight", {g.n_embd, g.n_ff_dense}, Init::Matrix});
      ts.push_back({p + "ffn_up.weight", {g.n_embd, g.n_ff_dense}, Init::Matrix});
      ts.push_back({p + "ffn_down.weight", {g.n_ff_dense, g.n_embd}, Init::Matrix});
      continue;
    }
    ts.push_back({p + "ffn_gate_inp.weight", {g.n_embd, g.n_experts}, Init::Router, skew_layer});
    if (g.arch == Arch::Deepseek2 && g.v3_gating) ts.push_back({p + "exp_probs_b.bias", {g.n_experts}, Init::Bias, skew_layer});
    ts.push_back({p + "ffn_gate_exps.weight", {g.n_embd, g.n_ff_expert, g.n_experts}, Init::Matrix});
    ts.push_back({p + "ffn_up_exps.weight", {g.n_embd, g.n_ff_expert, g.n_experts}, Init::Matrix});
    ts.push_back({p + "ffn_down_exps.weight", {g.n_ff_expert, g.n_embd, g.n_experts}, Init::Matrix});
    if (g.arch == Arch::Deepseek2 && g.n_shared_experts > 0) {
      const int64_t ff = g.n_ff_expert * g.n_shared_experts;
      ts.push_back({p + "ffn_gate_shexp.weight", {g.n_embd, ff}, Init::Matrix});
      ts.push_back({p + "ffn_up_shexp.weight", {g.n_embd, ff}, Init::Matrix});
      ts.push_back({p + "ffn_down_shexp.weight", {ff, g.n_embd}, Init::Matrix});
    }
  }
  return ts;
}

void write_metadata(const GenSpec& g, GgufWriter& w) {
  const bool ds = g.arch == Arch::Deepseek2;
  const std::string a = ds ? "deepseek2" : "qwen3moe";
  w.set_string("general.architecture", a);
  w.set_string("general.name", g.name);
  w.set_u32("general.file_type", gguf_file_type(g.type, g.q4_k_m));
  const std::string p = a + ".";
  w.set_u32(p + "block_count", uint32_t(g.n_layer + g.n_nextn));
  if (g.n_nextn > 0) w.set_u32(p + "nextn_predict_layers", uint32_t(g.n_nextn));
  w.set_u32(p + "context_length", uint32_t(g.n_ctx));
  w.set_u32(p + "embedding_length", uint32_t(g.n_embd));
  w.set_u32(p + "attention.head_count", uint32_t(g.n_head));
  w.set_f32(p + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.set_u32(p + "expert_count", uint32_t(g.n_experts));
  w.set_u32(p + "expert_used_count", uint32_t(g.n_used));
  w.set_u32(p + "expert_feed_forward_length", uint32_t(g.n_ff_expert));
  if (ds) {
    const int64_t qk = g.qk_nope_dim + g.qk_rope_dim;
    w.set_u32(p + "feed_forward_length", uint32_t(g.n_ff_dense));
    w.set_u32(p + "vocab_size", uint32_t(g.n_vocab));
    w.set_u32(p + "leading_dense_block_count", uint32_t(g.n_dense_lead));
    w.set_f32(p + "rope.freq_base", 10000.0f);
    w.set_u32(p + "rope.dimension_count", uint32_t(g.qk_rope_dim));
    if (g.q_lora_rank > 0) w.set_u32(p + "attention.q_lora_rank", uint32_t(g.q_lora_rank));
    w.set_u32(p + "attention.kv_lora_rank", uint32_t(g.kv_lora_rank));
    if (g.mla_split) {
      w.set_u32(p + "attention.head_count_kv", 1);
      w.set_u32(p + "attention.key_length", uint32_t(g.kv_lora_rank + g.qk_rope_dim));
      w.set_u32(p + "attention.value_length", uint32_t(g.kv_lora_rank));
      w.set_u32(p + "attention.key_length_mla", uint32_t(qk));
      w.set_u32(p + "attention.value_length_mla", uint32_t(g.v_head_dim));
    } else {
      w.set_u32(p + "attention.head_count_kv", uint32_t(g.n_head));
      w.set_u32(p + "attention.key_length", uint32_t(qk));
      w.set_u32(p + "attention.value_length", uint32_t(g.v_head_dim));
    }
    w.set_u32(p + "expert_shared_count", uint32_t(g.n_shared_experts));
    if (g.v3_gating) {
      w.set_f32(p + "expert_weights_scale", g.routed_scale);
      w.set_bool(p + "expert_weights_norm", true);
      w.set_u32(p + "expert_gating_func", 2);
      w.set_u32(p + "expert_group_count", uint32_t(g.n_group));
      w.set_u32(p + "expert_group_used_count", uint32_t(g.topk_group));
    } else {
      w.set_f32(p + "expert_weights_scale", 1.0f);
      w.set_u32(p + "expert_gating_func", 1);
    }
    if (g.yarn_factor > 1.0f) {
      w.set_string(p + "rope.scaling.type", "yarn");
      w.set_f32(p + "rope.scaling.factor", g.yarn_factor);
      w.set_u32(p + "rope.scaling.original_context_length", uint32_t(g.n_ctx / int64_t(g.yarn_factor)));
      w.set_f32(p + "rope.scaling.yarn_log_multiplier", 0.1f);  // 0.1 * mscale_all_dim, as converted
    }
  } else {
    w.set_u32(p + "feed_forward_length", uint32_t(g.n_ff_expert * g.n_used * 4));
    w.set_u32(p + "attention.head_count_kv", uint32_t(g.n_head_kv));
    w.set_u32(p + "attention.key_length", uint32_t(g.head_dim));
    w.set_u32(p + "attention.value_length", uint32_t(g.head_dim));
    w.set_f32(p + "rope.freq_base", 1000000.0f);
  }

  if (g.vocab) {
    if (int64_t(g.vocab->tokens.size()) != g.n_vocab)
      fail("gen-model: the vocabulary has {} tokens but n_vocab is {}", g.vocab->tokens.size(), g.n_vocab);
    write_gguf_vocab(w, *g.vocab);
    return;
  }
  write_gguf_vocab(w, make_synthetic_vocab(g.n_vocab, ds ? VocabFlavor::Deepseek : VocabFlavor::Qwen));
}

void check_spec(const GenSpec& g) {
  if (g.n_vocab < 300 || g.n_embd <= 0 || g.n_layer <= 0 || g.n_head <= 0 || g.n_experts <= 0 || g.n_used <= 0 ||
      g.n_used > g.n_experts || g.n_ff_expert <= 0) {
    fail("gen-model: invalid dimensions (vocab {}, embd {}, layers {}, heads {}, experts {} top-{}, expert ffn {})",
         g.n_vocab, g.n_embd, g.n_layer, g.n_head, g.n_experts, g.n_used, g.n_ff_expert);
  }
  if (g.arch == Arch::Qwen3Moe && (g.n_head_kv <= 0 || g.n_head % g.n_head_kv != 0 || g.head_dim % 2 != 0)) {
    fail("gen-model: qwen3moe needs head_count a multiple of head_count_kv and an even head_dim");
  }
  if (g.arch == Arch::Deepseek2 && g.v3_gating &&
      (g.n_group < 1 || g.n_experts % g.n_group != 0 || g.topk_group > g.n_group ||
       g.n_used > g.topk_group * (g.n_experts / g.n_group))) {
    fail("gen-model: {} expert groups ({} used) do not fit {} experts top-{}", g.n_group, g.topk_group, g.n_experts,
         g.n_used);
  }
  check_router_skew(g);
}

}  // namespace

GgmlType gen_tensor_type(const GenSpec& g, const std::string& name, int64_t ne0) {
  if (name.find("norm") != std::string::npos || ends_with(name, ".bias") || name.find("ffn_gate_inp") != std::string::npos) {
    return GgmlType::F32;
  }
  GgmlType t = g.type;
  if (g.q4_k_m) {
    const bool high = name == "output.weight" || name.find("ffn_down") != std::string::npos ||
                      name.find("attn_v_b") != std::string::npos || name.find("attn_kv_b") != std::string::npos;
    t = high ? GgmlType::Q6_K : GgmlType::Q4_K;
  }
  return storable_type(t, ne0);
}

GenSpec gen_preset(Arch arch, const std::string& preset) {
  GenSpec g;
  g.arch = arch;
  g.name = std::string(arch == Arch::Deepseek2 ? "deepseek2" : "qwen3moe") + "-" + preset;
  if (preset == "tiny") {
    if (arch == Arch::Qwen3Moe) {
      g.n_layer = 2;
      g.n_head = 4;
      g.n_head_kv = 2;
      g.head_dim = 64;
      g.n_experts = 8;
      g.n_used = 2;
    }
    return g;
  }
  if (preset != "mid") fail("unknown preset '{}' (tiny, mid)", preset);
  g.n_vocab = 16384;
  g.n_embd = 2048;
  g.n_layer = 16;
  g.n_head = 16;
  g.n_ctx = 32768;
  if (arch == Arch::Deepseek2) {
    // DeepSeek-V2-Lite's shape, narrower: about 2.6B parameters, 0.5B active per token.
    g.q_lora_rank = 768;
    g.kv_lora_rank = 512;
    g.qk_nope_dim = 128;
    g.qk_rope_dim = 64;
    g.v_head_dim = 128;
    g.n_dense_lead = 1;
    g.n_ff_dense = 8192;
    g.n_experts = 64;
    g.n_used = 6;
    g.n_shared_experts = 2;
    g.n_ff_expert = 384;
    g.n_group = 8;
    g.topk_group = 4;
  } else {
    g.n_head = 32;
    g.n_head_kv = 4;
    g.head_dim = 128;
    g.n_experts = 64;
    g.n_used = 8;
    g.n_ff_expert = 384;
  }
  return g;
}

std::vector<std::string> gen_preset_names() { return {"tiny", "mid"}; }

int64_t gen_parameter_count(const GenSpec& g, bool active_only) {
  int64_t n = 0;
  for (const GenTensor& t : tensor_list(g)) {
    int64_t e = 1;
    for (int64_t d : t.ne) e *= d;
    if (active_only && t.ne.size() == 3 && t.name.find("_exps") != std::string::npos) e = e / t.ne[2] * g.n_used;
    if (active_only && t.name == "token_embd.weight") e = t.ne[0];
    n += e;
  }
  return n;
}

namespace {

// The model as a writer whose tensor fills run on `pool` when the bytes are asked for.
GgufWriter generated_model(const GenSpec& g, ThreadPool& pool) {
  check_spec(g);
  GgufWriter w;
  write_metadata(g, w);
  auto skew = std::make_shared<const RouterSkew>(g);
  for (const GenTensor& t : tensor_list(g)) {
    const GgmlType type = gen_tensor_type(g, t.name, t.ne[0]);
    w.add_tensor(t.name, type, t.ne, [g, t, type, skew, &pool](uint8_t* dst, size_t) {
      int64_t rows = 1;
      for (size_t i = 1; i < t.ne.size(); ++i) rows *= t.ne[i];
      const size_t rb = row_bytes(type, t.ne[0]);
      pool.parallel_for(rows, 16, [&](int64_t b, int64_t e) {
        std::vector<float> row(size_t(t.ne[0]));
        for (int64_t r = b; r < e; ++r) {
          fill_row(t, g.seed, r, row.data());
          if (skew->active()) skew_row(*skew, t, g.n_embd, r, row.data());
          quantize_row(type, row.data(), dst + size_t(r) * rb, t.ne[0]);
        }
      });
    });
  }
  return w;
}

}  // namespace

void write_generated_model(const GenSpec& g, const std::string& path,
                           const std::function<void(uint64_t, uint64_t)>& progress) {
  ThreadPool pool(0);
  generated_model(g, pool).write(path, progress);
}

void write_generated_hf(const GenSpec& spec, const std::string& dir, const HfExportOptions& options,
                        const std::function<void(double)>& progress) {
  // The bf16 GGUF twin, in memory: its weights are exactly what a BF16 checkpoint holds.
  GenSpec g = spec;
  g.type = GgmlType::BF16;
  g.q4_k_m = false;
  g.mla_split = true;  // checkpoints hold kv_b_proj; the map goes through the split form
  ThreadPool pool(0);
  const std::vector<uint8_t> bytes = generated_model(g, pool).to_bytes();
  const GgufFile twin(g.name, bytes.data(), bytes.size());
  export_hf_checkpoint(twin, dir, options, progress);
}

}  // namespace moe
