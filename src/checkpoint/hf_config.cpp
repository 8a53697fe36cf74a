#include "checkpoint/hf_config.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace moe {
namespace {

using nlohmann::json;

// Typed reads of config.json fields; a field that is present but null counts as absent, as
// transformers treats it.
struct Fields {
  std::string path;
  const json& j;

  const json* get(const std::string& key) const {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  [[noreturn]] void bad(const std::string& key, const std::string& why) const {
    fail("{}: field '{}' {}", path, key, why);
  }
  int64_t integer(const std::string& key, int64_t min = 1) const {
    const json* v = get(key);
    if (!v) bad(key, "is missing");
    return checked(key, *v, min);
  }
  int64_t integer_or(const std::string& key, int64_t fallback, int64_t min = 0) const {
    const json* v = get(key);
    return v ? checked(key, *v, min) : fallback;
  }
  std::optional<int64_t> optional_integer(const std::string& key, int64_t min = 1) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    return checked(key, *v, min);
  }
  double number_or(const std::string& key, double fallback) const {
    const json* v = get(key);
    if (!v) return fallback;
    if (!v->is_number()) bad(key, "must be a number");
    return v->get<double>();
  }
  bool flag_or(const std::string& key, bool fallback) const {
    const json* v = get(key);
    if (!v) return fallback;
    if (!v->is_boolean()) bad(key, "must be true or false");
    return v->get<bool>();
  }
  std::string string_or(const std::string& key, const std::string& fallback) const {
    const json* v = get(key);
    if (!v) return fallback;
    if (!v->is_string()) bad(key, "must be a string");
    return v->get<std::string>();
  }

 private:
  int64_t checked(const std::string& key, const json& v, int64_t min) const {
    if (!v.is_number_integer()) bad(key, "must be an integer");
    const int64_t x = v.get<int64_t>();
    if (x < min || x > (int64_t(1) << 30)) bad(key, fmt::format("= {} is out of range ({}..2^30)", x, min));
    return x;
  }
};

json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open (a Hugging Face model directory needs config.json)", path);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    json j = json::parse(ss.str());
    if (!j.is_object()) fail("{}: expected a JSON object", path);
    return j;
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
}

// rope_scaling: null, or YaRN as DeepSeek and Qwen3 use it.
void write_rope_scaling(const Fields& c, GgufWriter& w, const std::string& p, bool deepseek) {
  const json* rs = c.get("rope_scaling");
  if (!rs) return;
  if (!rs->is_object()) c.bad("rope_scaling", "must be an object or null");
  const Fields r{c.path + " rope_scaling", *rs};
  const std::string type = r.string_or("type", r.string_or("rope_type", ""));
  if (type == "default" || type.empty()) return;
  if (type != "yarn") c.bad("rope_scaling.type", fmt::format("'{}' is not supported (yarn, or null)", type));
  const double factor = r.number_or("factor", 0.0);
  if (!(factor >= 1.0)) c.bad("rope_scaling.factor", "must be a number >= 1");
  w.set_string(p + "rope.scaling.type", "yarn");
  w.set_f32(p + "rope.scaling.factor", float(factor));
  w.set_u32(p + "rope.scaling.original_context_length",
            uint32_t(r.integer("original_max_position_embeddings")));
  if (r.get("beta_fast")) w.set_f32(p + "rope.scaling.yarn_beta_fast", float(r.number_or("beta_fast", 32.0)));
  if (r.get("beta_slow")) w.set_f32(p + "rope.scaling.yarn_beta_slow", float(r.number_or("beta_slow", 1.0)));
  if (!deepseek) return;
  // DeepSeek scales cos/sin by mscale(mscale) / mscale(mscale_all_dim) and the logits by
  // mscale(mscale_all_dim)^2; the GGUF convention (and so the engine) holds one of them.
  const double mscale = r.number_or("mscale", 1.0), mscale_all = r.number_or("mscale_all_dim", 0.0);
  if (mscale_all != 0.0 && std::abs(mscale - mscale_all) > 1e-6)
    c.bad("rope_scaling.mscale", fmt::format("= {} differs from mscale_all_dim {}, which is not supported", mscale, mscale_all));
  if (mscale_all != 0.0) w.set_f32(p + "rope.scaling.yarn_log_multiplier", float(0.1 * mscale_all));
}

// general.architecture and the keys every architecture has, under "<arch>.".
void write_common(const Fields& c, GgufWriter& w, const std::string& arch) {
  w.set_string("general.architecture", arch);
  const std::string p = arch + ".";
  w.set_u32(p + "block_count", uint32_t(c.integer("num_hidden_layers")));
  w.set_u32(p + "context_length", uint32_t(c.integer_or("max_position_embeddings", 4096, 1)));
  w.set_u32(p + "embedding_length", uint32_t(c.integer("hidden_size")));
  w.set_u32(p + "attention.head_count", uint32_t(c.integer("num_attention_heads")));
  w.set_f32(p + "attention.layer_norm_rms_epsilon", float(c.number_or("rms_norm_eps", 1e-6)));
  w.set_u32(p + "expert_used_count", uint32_t(c.integer("num_experts_per_tok")));
  w.set_u32(p + "expert_feed_forward_length", uint32_t(c.integer("moe_intermediate_size")));
}

void read_deepseek(const Fields& c, HfModelConfig& m) {
  GgufWriter& w = m.metadata;
  const std::string p = "deepseek2.";
  write_common(c, w, "deepseek2");
  if (c.integer_or("moe_layer_freq", 1, 1) != 1) c.bad("moe_layer_freq", "other than 1 is not supported");
  const int64_t n_layer = c.integer("num_hidden_layers");
  w.set_u32(p + "expert_count", uint32_t(c.integer("n_routed_experts")));
  w.set_u32(p + "feed_forward_length", uint32_t(c.integer("intermediate_size")));
  w.set_u32(p + "vocab_size", uint32_t(c.integer("vocab_size")));
  w.set_u32(p + "leading_dense_block_count", uint32_t(std::min(c.integer_or("first_k_dense_replace", 0), n_layer)));
  w.set_f32(p + "rope.freq_base", float(c.number_or("rope_theta", 10000.0)));
  const int64_t rope = c.integer("qk_rope_head_dim"), nope = c.integer("qk_nope_head_dim");
  const int64_t kv_lora = c.integer("kv_lora_rank"), v = c.integer("v_head_dim");
  w.set_u32(p + "rope.dimension_count", uint32_t(rope));
  if (auto q_lora = c.optional_integer("q_lora_rank")) w.set_u32(p + "attention.q_lora_rank", uint32_t(*q_lora));
  w.set_u32(p + "attention.kv_lora_rank", uint32_t(kv_lora));
  // MLA run as MQA over the latent rows: llama.cpp's converter writes these five.
  w.set_u32(p + "attention.head_count_kv", 1);
  w.set_u32(p + "attention.key_length", uint32_t(kv_lora + rope));
  w.set_u32(p + "attention.value_length", uint32_t(kv_lora));
  w.set_u32(p + "attention.key_length_mla", uint32_t(nope + rope));
  w.set_u32(p + "attention.value_length_mla", uint32_t(v));
  w.set_u32(p + "expert_shared_count", uint32_t(c.integer_or("n_shared_experts", 0)));
  w.set_f32(p + "expert_weights_scale", float(c.number_or("routed_scaling_factor", 1.0)));
  if (c.flag_or("norm_topk_prob", false)) w.set_bool(p + "expert_weights_norm", true);
  const std::string scoring = c.string_or("scoring_func", "softmax");
  if (scoring != "softmax" && scoring != "sigmoid")
    c.bad("scoring_func", fmt::format("'{}' is not supported (softmax, sigmoid)", scoring));
  w.set_u32(p + "expert_gating_func", scoring == "sigmoid" ? 2 : 1);
  const std::string method = c.string_or("topk_method", "greedy");
  if (method != "greedy" && method != "group_limited_greedy" && method != "noaux_tc")
    c.bad("topk_method", fmt::format("'{}' is not supported (greedy, group_limited_greedy, noaux_tc)", method));
  m.score_bias = method == "noaux_tc";
  if (method != "greedy") {
    w.set_u32(p + "expert_group_count", uint32_t(c.integer_or("n_group", 1, 1)));
    w.set_u32(p + "expert_group_used_count", uint32_t(c.integer_or("topk_group", 1, 1)));
  }
  write_rope_scaling(c, w, p, true);
  m.n_mtp_layers = c.integer_or("num_nextn_predict_layers", 0);
}

void read_qwen3moe(const Fields& c, HfModelConfig& m) {
  GgufWriter& w = m.metadata;
  const std::string p = "qwen3moe.";
  write_common(c, w, "qwen3moe");
  if (c.integer_or("decoder_sparse_step", 1, 1) != 1) c.bad("decoder_sparse_step", "other than 1 is not supported");
  if (const json* dense = c.get("mlp_only_layers"); dense && !(dense->is_array() && dense->empty()))
    c.bad("mlp_only_layers", "must be empty: dense layers in a Qwen3-MoE model are not supported");
  if (c.flag_or("attention_bias", false)) c.bad("attention_bias", "true is not supported");
  if (!c.flag_or("norm_topk_prob", true)) c.bad("norm_topk_prob", "false is not supported for qwen3moe");
  const int64_t n_embd = c.integer("hidden_size"), n_head = c.integer("num_attention_heads");
  const int64_t head_dim = c.integer_or("head_dim", n_embd / n_head, 1);
  w.set_u32(p + "expert_count", uint32_t(c.integer("num_experts")));
  w.set_u32(p + "feed_forward_length", uint32_t(c.integer_or("intermediate_size", 0)));
  w.set_u32(p + "attention.head_count_kv", uint32_t(c.integer_or("num_key_value_heads", n_head, 1)));
  w.set_u32(p + "attention.key_length", uint32_t(head_dim));
  w.set_u32(p + "attention.value_length", uint32_t(head_dim));
  w.set_f32(p + "rope.freq_base", float(c.number_or("rope_theta", 1000000.0)));
  write_rope_scaling(c, w, p, false);
}

void read_quantization(const Fields& c, HfModelConfig& m) {
  const json* q = c.get("quantization_config");
  if (!q) return;
  if (!q->is_object()) c.bad("quantization_config", "must be an object");
  const Fields r{c.path, *q};
  const std::string method = r.string_or("quant_method", "");
  if (method != "fp8")
    c.bad("quantization_config.quant_method", fmt::format("'{}' is not supported (fp8)", method));
  const std::string fmt_name = r.string_or("fmt", "e4m3");
  if (fmt_name != "e4m3") c.bad("quantization_config.fmt", fmt::format("'{}' is not supported (e4m3)", fmt_name));
  const json* block = r.get("weight_block_size");
  if (!block || !block->is_array() || block->size() != 2 || !(*block)[0].is_number_integer() ||
      !(*block)[1].is_number_integer() || (*block)[0].get<int64_t>() <= 0 || (*block)[1].get<int64_t>() <= 0)
    c.bad("quantization_config.weight_block_size", "must be two positive integers (per-tensor FP8 scales are not supported)");
  m.fp8_block_rows = (*block)[0].get<int64_t>();
  m.fp8_block_cols = (*block)[1].get<int64_t>();
}

}  // namespace

HfModelConfig read_hf_config(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  const json j = read_json_file(path);
  const Fields c{path, j};
  HfModelConfig m;
  m.dir = dir;
  const json* archs = c.get("architectures");
  if (!archs || !archs->is_array() || archs->empty() || !(*archs)[0].is_string())
    c.bad("architectures", "must be a list naming the model class");
  m.architecture = (*archs)[0].get<std::string>();
  if (m.architecture == "DeepseekV3ForCausalLM" || m.architecture == "DeepseekV2ForCausalLM") {
    read_deepseek(c, m);
  } else if (m.architecture == "Qwen3MoeForCausalLM") {
    read_qwen3moe(c, m);
  } else {
    c.bad("architectures", fmt::format("['{}'] is not supported (DeepseekV3ForCausalLM, DeepseekV2ForCausalLM, "
                                       "Qwen3MoeForCausalLM)", m.architecture));
  }
  std::string name = c.string_or("_name_or_path", "");
  if (name.empty()) name = std::filesystem::path(dir).lexically_normal().filename().string();
  if (name.empty()) name = std::filesystem::absolute(dir).parent_path().filename().string();
  m.metadata.set_string("general.name", std::filesystem::path(name).filename().string());
  m.tied_embeddings = c.flag_or("tie_word_embeddings", false);
  read_quantization(c, m);

  // The engine's own reading of the same metadata checks the dimensions against each other.
  const std::vector<uint8_t> bytes = m.metadata.to_bytes();
  const GgufFile f(path, bytes.data(), bytes.size());
  m.config = ModelConfig::from_gguf(f);
  m.config.n_vocab = c.integer("vocab_size");
  return m;
}

}  // namespace moe
