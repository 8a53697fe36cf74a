#include "cli/sim_model_file.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "checkpoint/hf_config.h"
#include "kernels/kv_format.h"
#include "model/gguf.h"
#include "model/model_config.h"

namespace moe::cli {
namespace {

sim::ModelShape shape_of(const ModelConfig& m, const std::string& path, int64_t mtp_layers) {
  sim::ModelShape s;
  s.name = m.name.empty() ? std::filesystem::path(path).filename().string() : m.name;
  s.source = path;
  s.vocab = m.n_vocab;
  s.hidden = m.n_embd;
  s.layers = m.n_layer;
  s.dense_layers = m.arch == Arch::Deepseek2 ? m.n_dense_lead : 0;
  s.dense_ff = m.n_ff_dense;
  if (m.arch == Arch::Deepseek2) {
    s.attention = {sim::AttentionKind::mla, m.n_head, 0, 0, m.q_lora_rank, m.kv_lora_rank, m.qk_nope_dim, m.qk_rope_dim, m.v_head_dim};
  } else {
    s.attention = {sim::AttentionKind::gqa, m.n_head, m.n_head_kv, m.head_dim, 0, 0, 0, 0, 0};
  }
  s.experts = m.gating.n_experts;
  s.experts_per_token = m.gating.n_used;
  s.shared_experts = m.n_shared_experts;
  s.expert_ff = m.n_ff_expert;
  s.groups = std::max(1, m.gating.n_group);
  s.groups_per_token = std::max(1, m.gating.topk_group);
  s.mtp_layers = mtp_layers;
  return s;
}

// The simulator's name of a GGUF tensor type ("" where it has none).
std::string format_name(GgmlType t) {
  switch (plain_type(t)) {
    case GgmlType::F32: return "f32";
    case GgmlType::F16: return "f16";
    case GgmlType::BF16: return "bf16";
    case GgmlType::Q8_0: return "q8_0";
    case GgmlType::Q6_K: return "q6_k";
    case GgmlType::Q5_0: return "q5_0";
    case GgmlType::Q4_K: return "q4_k";
    case GgmlType::Q4_0: return "q4_0";
    default: return "";
  }
}

}  // namespace

sim::ModelShape read_model_file(const std::string& kind, const std::string& path) {
  if (kind == "gguf") {
    const GgufFile file(path);
    return shape_of(ModelConfig::from_gguf(file), path, 0);
  }
  const HfModelConfig hf = read_hf_config(path);
  return shape_of(hf.config, path, hf.n_mtp_layers);
}

sim::Precision read_model_precision(const std::string& kind, const std::string& path) {
  sim::Precision p;
  p.kv_cache = kv_dtype_name(kKvDtypeAuto);  // what serve holds its cache in unless told
  if (kind == "gguf") {
    const GgufFile file(path);
    // Elements per type over the 2-D weight matrices (norms, biases and routers are small).
    std::map<std::string, int64_t> elements;
    for (const GgufTensorInfo& t : file.tensors()) {
      if (t.ne.size() < 2 || t.name.find("ffn_gate_inp") != std::string::npos) continue;
      const std::string name = format_name(t.type);
      elements[name.empty() ? std::string(type_name(t.type)) : name] += t.n_elements();
    }
    std::string most = "bf16";
    int64_t best = -1;
    for (const auto& [name, n] : elements)
      if (n > best) most = name, best = n;
    if (sim::format_bytes(most) == 0) most = "q8_0";  // a type the simulator does not list: about 1 byte a weight
    p.weights = most;
  } else {
    const HfModelConfig hf = read_hf_config(path);
    p.weights = hf.fp8_block_rows > 0 ? "q8_0" : "bf16";  // --weight-type auto: FP8 served as q8_0
  }
  const bool quantized = p.weights != "f32" && p.weights != "bf16" && p.weights != "f16";
  p.activations = quantized ? "q8_0" : "f32";
  return p;
}

}  // namespace moe::cli
