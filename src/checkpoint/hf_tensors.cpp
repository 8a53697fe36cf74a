#include "checkpoint/hf_tensors.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "core/error.h"
#include "core/fp16.h"
#include "core/fp8.h"

namespace moe {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The map from a model's config alone: which Hugging Face tensors make each GGUF tensor.
class MapBuilder {
 public:
  MapBuilder(const ModelConfig& c, bool tied, bool score_bias) : c_(c), tied_(tied), score_bias_(score_bias) {}

  std::vector<HfMapEntry> run() {
    add("token_embd.weight", HfRole::Matrix, "model.embed_tokens.weight", {c_.n_vocab, c_.n_embd});
    add("output_norm.weight", HfRole::Norm, "model.norm.weight", {c_.n_embd});
    if (!tied_) add("output.weight", HfRole::Matrix, "lm_head.weight", {c_.n_vocab, c_.n_embd});
    for (int64_t l = 0; l < c_.n_layer; ++l) layer(l);
    if (c_.n_nextn == 1) {
      layer(c_.n_layer);
      mtp(c_.n_layer);
    }
    return std::move(map_);
  }

 private:
  void layer(int64_t l) {
    const ModelConfig& c = c_;
    const std::string g = "blk." + std::to_string(l) + ".", h = "model.layers." + std::to_string(l) + ".";
    add(g + "attn_norm.weight", HfRole::Norm, h + "input_layernorm.weight", {c.n_embd});
    add(g + "ffn_norm.weight", HfRole::Norm, h + "post_attention_layernorm.weight", {c.n_embd});
    if (c.arch == Arch::Deepseek2) {
      mla(g, h + "self_attn.");
    } else {
      const std::string a = h + "self_attn.";
      add(g + "attn_q.weight", HfRole::Matrix, a + "q_proj.weight", {c.n_head * c.head_dim, c.n_embd});
      add(g + "attn_k.weight", HfRole::Matrix, a + "k_proj.weight", {c.n_head_kv * c.head_dim, c.n_embd});
      add(g + "attn_v.weight", HfRole::Matrix, a + "v_proj.weight", {c.n_head_kv * c.head_dim, c.n_embd});
      add(g + "attn_output.weight", HfRole::Matrix, a + "o_proj.weight", {c.n_embd, c.n_head * c.head_dim});
      add(g + "attn_q_norm.weight", HfRole::Norm, a + "q_norm.weight", {c.head_dim});
      add(g + "attn_k_norm.weight", HfRole::Norm, a + "k_norm.weight", {c.head_dim});
    }
    const std::string mlp = h + "mlp.";
    if (!c.is_moe_layer(l)) {
      ffn(g, "", mlp, c.n_ff_dense);
      return;
    }
    const int64_t n_exp = c.gating.n_experts;
    add(g + "ffn_gate_inp.weight", HfRole::Router, mlp + "gate.weight", {n_exp, c.n_embd});
    if (c.arch == Arch::Deepseek2 && score_bias_)
      add(g + "exp_probs_b.bias", HfRole::Bias, mlp + "gate.e_score_correction_bias", {n_exp});
    experts(g + "ffn_gate_exps.weight", mlp, "gate_proj", c.n_ff_expert, c.n_embd);
    experts(g + "ffn_up_exps.weight", mlp, "up_proj", c.n_ff_expert, c.n_embd);
    experts(g + "ffn_down_exps.weight", mlp, "down_proj", c.n_embd, c.n_ff_expert);
    if (c.n_shared_experts > 0) ffn(g, "_shexp", mlp + "shared_experts.", c.n_ff_expert * c.n_shared_experts);
  }

  // DeepSeek-V3's MTP layer: a decoder layer (layer()) plus these. Its copies of the
  // embedding and the head may be left out of a checkpoint: they are the model's.
  void mtp(int64_t l) {
    const std::string g = "blk." + std::to_string(l) + ".nextn.", h = "model.layers." + std::to_string(l) + ".";
    add(g + "eh_proj.weight", HfRole::Matrix, h + "eh_proj.weight", {c_.n_embd, 2 * c_.n_embd});
    add(g + "enorm.weight", HfRole::Norm, h + "enorm.weight", {c_.n_embd});
    add(g + "hnorm.weight", HfRole::Norm, h + "hnorm.weight", {c_.n_embd});
    add(g + "shared_head_norm.weight", HfRole::Norm, h + "shared_head.norm.weight", {c_.n_embd});
    add(g + "embed_tokens.weight", HfRole::Matrix, h + "embed_tokens.weight", {c_.n_vocab, c_.n_embd});
    map_.back().optional = true;
    add(g + "shared_head_head.weight", HfRole::Matrix, h + "shared_head.head.weight", {c_.n_vocab, c_.n_embd});
    map_.back().optional = true;
  }

  void ffn(const std::string& g, const std::string& suffix, const std::string& h, int64_t n_ff) {
    add(g + "ffn_gate" + suffix + ".weight", HfRole::Matrix, h + "gate_proj.weight", {n_ff, c_.n_embd});
    add(g + "ffn_up" + suffix + ".weight", HfRole::Matrix, h + "up_proj.weight", {n_ff, c_.n_embd});
    add(g + "ffn_down" + suffix + ".weight", HfRole::Matrix, h + "down_proj.weight", {c_.n_embd, n_ff});
  }

  void mla(const std::string& g, const std::string& a) {
    const ModelConfig& c = c_;
    const int64_t qk = c.qk_nope_dim + c.qk_rope_dim;
    if (c.q_lora_rank > 0) {
      add(g + "attn_q_a.weight", HfRole::Matrix, a + "q_a_proj.weight", {c.q_lora_rank, c.n_embd});
      add(g + "attn_q_a_norm.weight", HfRole::Norm, a + "q_a_layernorm.weight", {c.q_lora_rank});
      add(g + "attn_q_b.weight", HfRole::Matrix, a + "q_b_proj.weight", {c.n_head * qk, c.q_lora_rank});
    } else {
      add(g + "attn_q.weight", HfRole::Matrix, a + "q_proj.weight", {c.n_head * qk, c.n_embd});
    }
    add(g + "attn_kv_a_mqa.weight", HfRole::Matrix, a + "kv_a_proj_with_mqa.weight",
        {c.kv_lora_rank + c.qk_rope_dim, c.n_embd});
    add(g + "attn_kv_a_norm.weight", HfRole::Norm, a + "kv_a_layernorm.weight", {c.kv_lora_rank});
    const std::vector<int64_t> kv_b{c.n_head * (c.qk_nope_dim + c.v_head_dim), c.kv_lora_rank};
    map_.push_back({g + "attn_k_b.weight", {c.qk_nope_dim, c.kv_lora_rank, c.n_head}, HfLayout::KvbKeys,
                    HfRole::Matrix, {a + "kv_b_proj.weight"}, kv_b});
    map_.push_back({g + "attn_v_b.weight", {c.kv_lora_rank, c.v_head_dim, c.n_head}, HfLayout::KvbValues,
                    HfRole::Matrix, {a + "kv_b_proj.weight"}, kv_b});
    add(g + "attn_output.weight", HfRole::Matrix, a + "o_proj.weight", {c.n_embd, c.n_head * c.v_head_dim});
  }

  void experts(const std::string& gguf, const std::string& mlp, const std::string& proj, int64_t rows, int64_t cols) {
    HfMapEntry e{gguf, {cols, rows, c_.gating.n_experts}, HfLayout::ExpertStack, HfRole::Matrix, {}, {rows, cols}};
    for (int64_t x = 0; x < c_.gating.n_experts; ++x)
      e.hf_names.push_back(mlp + "experts." + std::to_string(x) + "." + proj + ".weight");
    map_.push_back(std::move(e));
  }

  void add(const std::string& gguf, HfRole role, const std::string& hf, std::vector<int64_t> shape) {
    std::vector<int64_t> ne(shape.rbegin(), shape.rend());
    map_.push_back({gguf, std::move(ne), HfLayout::Direct, role, {hf}, std::move(shape)});
  }

  const ModelConfig& c_;
  bool tied_, score_bias_;
  std::vector<HfMapEntry> map_;
};

// The map resolved against a checkpoint's shards.
class Planner {
 public:
  Planner(const HfModelConfig& m, const SafetensorsSet& st) : m_(m), st_(st) {
    plan_.fp8_block_rows = m.fp8_block_rows;
    plan_.fp8_block_cols = m.fp8_block_cols;
    const ModelConfig& c = m.config;
    plan_.kv_nope = c.qk_nope_dim;
    plan_.kv_v = c.v_head_dim;
    plan_.kv_lora = c.kv_lora_rank;
  }

  HfPlan run() {
    for (HfMapEntry& e : hf_tensor_map(m_.config, m_.tied_embeddings, m_.score_bias)) {
      if (e.optional && !st_.find(e.hf_names.front())) continue;
      HfPlannedTensor t{std::move(e.name), std::move(e.ne), e.layout, e.role, {}};
      for (const std::string& name : e.hf_names) {
        t.sources.push_back(source(name, e.role, e.hf_shape));
        if (t.sources.back().tensor->dtype != t.sources.front().tensor->dtype)
          fail("{}: tensor '{}' is {} where '{}' is {}; one layer's experts must share a dtype", st_.file_of(name),
               name, st_dtype_name(t.sources.back().tensor->dtype), t.sources.front().name,
               st_dtype_name(t.sources.front().tensor->dtype));
      }
      plan_.tensors.push_back(std::move(t));
    }
    check_leftovers();
    return std::move(plan_);
  }

 private:
  HfSource source(const std::string& name, HfRole role, const std::vector<int64_t>& shape) {
    const StTensor* t = st_.find(name);
    if (!t) fail("{}: tensor '{}' is missing from the checkpoint", m_.dir, name);
    used_.insert(name);
    const std::string& file = st_.file_of(name);
    if (t->shape != shape)
      fail("{}: tensor '{}' has shape [{}], expected [{}]", file, name, fmt::join(t->shape, ", "), fmt::join(shape, ", "));
    HfSource s{name, t, nullptr};
    switch (t->dtype) {
      case StDtype::F32:
      case StDtype::F16:
      case StDtype::BF16: break;
      case StDtype::F8_E4M3: {
        if (role != HfRole::Matrix || shape.size() != 2)
          fail("{}: tensor '{}' is F8_E4M3, which only weight matrices may be", file, name);
        if (m_.fp8_block_rows == 0)
          fail("{}: tensor '{}' is F8_E4M3 but config.json has no fp8 quantization_config with weight_block_size", file, name);
        const std::string scale_name = name.substr(0, name.size() - std::string(".weight").size()) + ".weight_scale_inv";
        s.scale = st_.find(scale_name);
        if (!s.scale) fail("{}: tensor '{}' is F8_E4M3 but its block scales '{}' are missing", file, name, scale_name);
        used_.insert(scale_name);
        const std::vector<int64_t> want{ceil_div(shape[0], m_.fp8_block_rows), ceil_div(shape[1], m_.fp8_block_cols)};
        if (s.scale->dtype != StDtype::F32 || s.scale->shape != want)
          fail("{}: tensor '{}' is {} [{}], expected F32 [{}] (one scale per {}x{} block)", st_.file_of(scale_name),
               scale_name, st_dtype_name(s.scale->dtype), fmt::join(s.scale->shape, ", "), fmt::join(want, ", "),
               m_.fp8_block_rows, m_.fp8_block_cols);
        break;
      }
      default:
        fail("{}: tensor '{}' has dtype {} (supported: F32, F16, BF16, and F8_E4M3 for weight matrices)", file, name,
             st_dtype_name(t->dtype));
    }
    return s;
  }

  // Tensors of MTP layers not read (more than one, or one without eh_proj) are skipped with
  // a note; anything
  // else left over is reported, since a checkpoint the map does not cover may be a variant
  // the engine would compute wrongly.
  void check_leftovers() {
    const int64_t n_layer = m_.config.n_layer;
    std::vector<std::string> unknown;
    for (const std::string& name : st_.names()) {
      if (used_.count(name)) continue;
      int64_t layer = -1;
      if (name.starts_with("model.layers.")) layer = std::atoll(name.c_str() + std::strlen("model.layers."));
      if (layer >= n_layer + m_.config.n_nextn && m_.n_mtp_layers > 0) plan_.skipped.push_back(name);
      else unknown.push_back(name);
    }
    if (!plan_.skipped.empty())
      spdlog::info("{}: {} tensors of {} MTP (next-token prediction) layer(s) are not used and were skipped", m_.dir,
                   plan_.skipped.size(), m_.n_mtp_layers);
    if (!unknown.empty())
      fail("{}: tensor '{}' (in {}) is not part of a {} model ({} such tensors)", m_.dir, unknown.front(),
           st_.file_of(unknown.front()), m_.architecture, unknown.size());
  }

  const HfModelConfig& m_;
  const SafetensorsSet& st_;
  HfPlan plan_;
  std::set<std::string> used_;
};

}  // namespace

int64_t HfPlannedTensor::n_rows() const {
  int64_t n = 1;
  for (size_t i = 1; i < ne.size(); ++i) n *= ne[i];
  return n;
}

std::vector<HfMapEntry> hf_tensor_map(const ModelConfig& c, bool tied_embeddings, bool score_bias) {
  return MapBuilder(c, tied_embeddings, score_bias).run();
}

HfPlan plan_hf_tensors(const HfModelConfig& m, const SafetensorsSet& st) { return Planner(m, st).run(); }

HfRowRef hf_row_source(const HfPlan& plan, const HfPlannedTensor& t, int64_t r) {
  switch (t.layout) {
    case HfLayout::Direct: return {&t.sources[0], r};
    case HfLayout::ExpertStack: return {&t.sources[size_t(r / t.ne[1])], r % t.ne[1]};
    case HfLayout::KvbValues: {
      const int64_t head = r / plan.kv_v, j = r % plan.kv_v;
      return {&t.sources[0], head * (plan.kv_nope + plan.kv_v) + plan.kv_nope + j};
    }
    case HfLayout::KvbKeys: break;
  }
  fail("tensor '{}': its rows are not rows of a source", t.name);
}

void hf_decode_row(const HfPlan& plan, const HfSource& s, int64_t row, int64_t col0, int64_t n, float* out) {
  const StTensor& t = *s.tensor;
  const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
  const size_t at = size_t(row * cols + col0);
  switch (t.dtype) {
    case StDtype::F32: std::memcpy(out, t.data + at * 4, size_t(n) * 4); return;
    case StDtype::F16:
    case StDtype::BF16: {
      const bool half = t.dtype == StDtype::F16;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, t.data + (at + size_t(i)) * 2, 2);
        out[i] = half ? fp16_to_f32(v) : bf16_to_f32(v);
      }
      return;
    }
    case StDtype::F8_E4M3: {
      const uint8_t* codes = t.data + at;
      const uint8_t* scales = s.scale->data + size_t((row / plan.fp8_block_rows) * s.scale->shape[1]) * 4;
      // One scale per run of columns in the same block.
      for (int64_t i = 0; i < n;) {
        const int64_t block = (col0 + i) / plan.fp8_block_cols;
        const int64_t end = std::min(n, (block + 1) * plan.fp8_block_cols - col0);
        float scale;
        std::memcpy(&scale, scales + size_t(block) * 4, 4);
        for (; i < end; ++i) out[i] = kFp8E4m3ToF32[codes[i]] * scale;
      }
      return;
    }
    default: fail("tensor '{}': dtype {} cannot be decoded", s.name, st_dtype_name(t.dtype));
  }
}

}  // namespace moe
