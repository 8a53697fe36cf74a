// config.json from a model file's metadata: the inverse of read_hf_config.
#include <cmath>

#include "checkpoint/hf_config.h"
#include "core/error.h"

namespace moe {
namespace {

using nlohmann::ordered_json;

ordered_json rope_scaling(const GgufFile& f, const ModelConfig& c, bool deepseek) {
  const std::string p = c.arch_name + ".";
  if (f.get_string(p + "rope.scaling.type").value_or("none") != "yarn") return nullptr;
  ordered_json j = {{"type", "yarn"},
                    {"factor", f.require_float(p + "rope.scaling.factor")},
                    {"original_max_position_embeddings", c.rope.n_ctx_orig},
                    {"beta_fast", c.rope.beta_fast},
                    {"beta_slow", c.rope.beta_slow}};
  if (deepseek) {
    const double m = f.get_float(p + "rope.scaling.yarn_log_multiplier").value_or(0.0) / 0.1;
    j["mscale"] = m;
    j["mscale_all_dim"] = m;
  }
  return j;
}

}  // namespace

nlohmann::ordered_json hf_config_for(const GgufFile& f, int64_t fp8_block) {
  const ModelConfig c = ModelConfig::from_gguf(f);
  const std::string p = c.arch_name + ".";
  const int64_t n_vocab = c.n_vocab ? c.n_vocab : f.find_tensor("token_embd.weight")->ne[1];
  ordered_json j;
  const bool deepseek = c.arch == Arch::Deepseek2;
  if (deepseek) {
    const bool v3 = c.gating.func == GatingFunc::Sigmoid;
    const bool bias = f.find_tensor("blk." + std::to_string(c.n_dense_lead) + ".exp_probs_b.bias") != nullptr;
    j = {{"architectures", {v3 ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM"}},
         {"model_type", v3 ? "deepseek_v3" : "deepseek_v2"},
         {"vocab_size", n_vocab},
         {"hidden_size", c.n_embd},
         {"intermediate_size", c.n_ff_dense},
         {"moe_intermediate_size", c.n_ff_expert},
         {"num_hidden_layers", c.n_layer},
         {"num_attention_heads", c.n_head},
         {"num_key_value_heads", c.n_head},
         {"n_shared_experts", c.n_shared_experts},
         {"n_routed_experts", c.gating.n_experts},
         {"routed_scaling_factor", c.gating.scale == 0.0f ? 1.0f : c.gating.scale},
         {"num_experts_per_tok", c.gating.n_used},
         {"n_group", c.gating.n_group},
         {"topk_group", c.gating.topk_group},
         {"topk_method", bias ? "noaux_tc" : c.gating.n_group > 1 ? "group_limited_greedy" : "greedy"},
         {"scoring_func", v3 ? "sigmoid" : "softmax"},
         {"norm_topk_prob", c.gating.normalize},
         {"first_k_dense_replace", c.n_dense_lead},
         {"moe_layer_freq", 1},
         {"q_lora_rank", c.q_lora_rank > 0 ? ordered_json(c.q_lora_rank) : ordered_json(nullptr)},
         {"kv_lora_rank", c.kv_lora_rank},
         {"qk_nope_head_dim", c.qk_nope_dim},
         {"qk_rope_head_dim", c.qk_rope_dim},
         {"v_head_dim", c.v_head_dim},
         {"num_nextn_predict_layers", c.n_nextn}};
  } else {
    j = {{"architectures", {"Qwen3MoeForCausalLM"}},
         {"model_type", "qwen3_moe"},
         {"vocab_size", n_vocab},
         {"hidden_size", c.n_embd},
         {"intermediate_size", f.get_int(p + "feed_forward_length").value_or(0)},
         {"moe_intermediate_size", c.n_ff_expert},
         {"num_hidden_layers", c.n_layer},
         {"num_attention_heads", c.n_head},
         {"num_key_value_heads", c.n_head_kv},
         {"head_dim", c.head_dim},
         {"num_experts", c.gating.n_experts},
         {"num_experts_per_tok", c.gating.n_used},
         {"norm_topk_prob", true},
         {"decoder_sparse_step", 1},
         {"mlp_only_layers", ordered_json::array()},
         {"attention_bias", false}};
  }
  j["max_position_embeddings"] = c.n_ctx_train;
  j["rope_theta"] = c.rope.freq_base;
  j["rope_scaling"] = rope_scaling(f, c, deepseek);
  j["rms_norm_eps"] = c.rms_eps;
  j["tie_word_embeddings"] = f.find_tensor("output.weight") == nullptr;
  if (c.bos_id >= 0) j["bos_token_id"] = c.bos_id;
  if (c.eos_id >= 0) j["eos_token_id"] = c.eos_id;
  j["torch_dtype"] = "bfloat16";
  if (!c.name.empty()) j["_name_or_path"] = c.name;
  if (fp8_block > 0)
    j["quantization_config"] = {{"activation_scheme", "dynamic"},
                                {"fmt", "e4m3"},
                                {"quant_method", "fp8"},
                                {"weight_block_size", {fp8_block, fp8_block}}};
  return j;
}

}  // namespace moe
