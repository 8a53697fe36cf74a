#include "sim/profiles.h"

#include <fmt/format.h>

#include "config/yaml_fields.h"
#include "core/error.h"

namespace moe::sim {

using config::MapReader;

double Hardware::peak_flops(const std::string& type) const {
  const auto it = flops.find(type);
  if (it == flops.end()) fail("hardware profile {} gives no peak FLOP/s for {} (flops.{})", name, type, type);
  return it->second;
}

std::string Hardware::attention_type() const { return flops.count("bf16") ? "bf16" : "f32"; }

double ModelShape::attention_params() const {
  const double h = double(hidden), n = double(attention.heads);
  if (attention.kind == AttentionKind::gqa) {
    const double d = double(attention.head_dim);
    return h * n * d + 2 * h * double(attention.kv_heads) * d + n * d * h;
  }
  const AttentionShape& a = attention;
  const double qk = double(a.qk_nope_dim + a.qk_rope_dim);
  const double q = a.q_lora_rank > 0 ? h * double(a.q_lora_rank) + double(a.q_lora_rank) * n * qk : h * n * qk;
  const double kv_a = h * double(a.kv_lora_rank + a.qk_rope_dim);
  const double kv_b = double(a.kv_lora_rank) * n * double(a.qk_nope_dim + a.v_head_dim);
  return q + kv_a + kv_b + n * double(a.v_head_dim) * h;
}

double ModelShape::kv_values_per_token_layer() const {
  if (attention.kind == AttentionKind::gqa) return 2.0 * double(attention.kv_heads * attention.head_dim);
  return double(attention.kv_lora_rank + attention.qk_rope_dim);
}

double ModelShape::absorbed_pair_flops() const {
  const double n = double(attention.heads);
  if (attention.kind == AttentionKind::gqa) return 4.0 * n * double(attention.head_dim);
  return 2.0 * n * double(attention.kv_lora_rank + attention.qk_rope_dim) + 2.0 * n * double(attention.kv_lora_rank);
}

double ModelShape::expanded_pair_flops() const {
  if (attention.kind == AttentionKind::gqa) return absorbed_pair_flops();
  const AttentionShape& a = attention;
  return 2.0 * double(a.heads) * double(a.qk_nope_dim + a.qk_rope_dim) + 2.0 * double(a.heads) * double(a.v_head_dim);
}

double ModelShape::expand_flops_per_token() const {
  if (attention.kind == AttentionKind::gqa) return 0;
  const AttentionShape& a = attention;
  return 2.0 * double(a.kv_lora_rank) * double(a.heads) * double(a.qk_nope_dim + a.v_head_dim);
}

double ModelShape::total_params() const {
  const double moe = double(moe_layers()) * (double(experts + shared_experts) * expert_params() + double(hidden * experts));
  return 2.0 * double(vocab * hidden) + double(layers) * attention_params() + double(dense_layers) * dense_ffn_params() + moe;
}

double ModelShape::active_params() const {
  const double moe =
      double(moe_layers()) * (double(experts_per_token + shared_experts) * expert_params() + double(hidden * experts));
  return 2.0 * double(vocab * hidden) + double(layers) * attention_params() + double(dense_layers) * dense_ffn_params() + moe;
}

double format_bytes(const std::string& name) {
  static const std::map<std::string, double> bytes = {
      {"f32", 4},          {"bf16", 2},     {"f16", 2},           {"fp8", 1},          {"fp8_e4m3", 1},
      {"int8", 1},         {"int4", 0.5},   {"q8_0", 34.0 / 32},  {"q6_k", 210.0 / 256}, {"q5_0", 22.0 / 32},
      {"q4_k", 144.0 / 256}, {"q4_0", 18.0 / 32}};
  const auto it = bytes.find(name);
  return it == bytes.end() ? 0 : it->second;
}

double Precision::weight_bytes() const { return format_bytes(weights); }
double Precision::kv_bytes() const { return format_bytes(kv_cache); }

std::string Precision::compute_type() const {
  if (activations == "fp8" || activations == "fp8_e4m3") return "fp8";
  if (activations == "int8" || activations == "q8_0") return "int8";
  if (activations == "f32") return "f32";
  return "bf16";
}

namespace {

Link read_link(const MapReader& parent, const std::string& file, const std::string& key) {
  MapReader r(file, parent.get(key), parent.field(key), {"bw", "latency_us"});
  if (!r.has("bw")) r.fail("bw", "is required (bytes/s, one direction, per device)");
  return Link{r.number("bw", 0, 0), r.number("latency_us", 0, -1e-300) * 1e-6};
}

double fraction(const MapReader& r, const std::string& key) {
  const double v = r.number(key, 1.0, 0);
  if (v > 1) r.fail(key, fmt::format("must be in (0, 1], not {}", v));
  return v;
}

}  // namespace

Hardware read_hardware(const std::string& file, const YAML::Node& node, const std::string& path) {
  const MapReader r(file, node, path,
                    {"name", "description", "devices_per_node", "flops", "mem_bw", "mem_gib", "scale_up", "scale_out",
                     "efficiency", "overhead", "sources"});
  Hardware hw;
  hw.name = r.text("name", "inline");
  hw.description = r.text("description", "");
  hw.devices_per_node = int32_t(r.integer("devices_per_node", 1, 1, 1 << 16));
  for (const char* key : {"flops", "mem_bw", "scale_up", "scale_out"})
    if (!r.has(key)) r.fail(key, "is required");
  {
    const MapReader f(file, r.get("flops"), r.field("flops"), {"f32", "bf16", "fp8", "int8"});
    for (const char* type : {"f32", "bf16", "fp8", "int8"})
      if (f.has(type)) hw.flops[type] = f.number(type, 0, 0);
    if (hw.flops.empty()) r.fail("flops", "needs at least one of f32, bf16, fp8, int8 (FLOP/s)");
  }
  hw.mem_bw = r.number("mem_bw", 0, 0);
  hw.mem_gib = r.number("mem_gib", 0, 0);
  hw.scale_up = read_link(r, file, "scale_up");
  hw.scale_out = read_link(r, file, "scale_out");
  {
    const MapReader e(file, r.get("efficiency"), r.field("efficiency"),
                      {"gemm", "memory", "attention_compute", "attention_memory", "scale_up", "scale_out"});
    hw.efficiency = Efficiency{fraction(e, "gemm"),          fraction(e, "memory"),   fraction(e, "attention_compute"),
                               fraction(e, "attention_memory"), fraction(e, "scale_up"), fraction(e, "scale_out")};
  }
  {
    const MapReader o(file, r.get("overhead"), r.field("overhead"), {"layer_us", "step_us", "wake_us"});
    hw.layer_overhead_s = o.number("layer_us", 0, -1e-300) * 1e-6;
    hw.step_overhead_s = o.number("step_us", 0, -1e-300) * 1e-6;
    hw.wake_s = o.number("wake_us", 0, -1e-300) * 1e-6;
  }
  if (r.has("sources")) {
    const YAML::Node s = r.get("sources");
    if (!s.IsMap()) config::fail_at(file, s, r.field("sources"), "must map a field to where its figure came from");
    for (auto it = s.begin(); it != s.end(); ++it) hw.sources[it->first.as<std::string>()] = it->second.as<std::string>();
  }
  return hw;
}

ModelShape read_model_shape(const std::string& file, const YAML::Node& node, const std::string& path) {
  const MapReader r(file, node, path,
                    {"name", "description", "source", "vocab", "hidden", "layers", "dense_layers", "dense_ff",
                     "attention", "moe", "mtp_layers"});
  ModelShape m;
  m.name = r.text("name", "inline");
  m.description = r.text("description", "");
  m.source = r.text("source", "");
  for (const char* key : {"vocab", "hidden", "layers", "attention"})
    if (!r.has(key)) r.fail(key, "is required");
  constexpr int64_t kBig = int64_t(1) << 40;
  m.vocab = r.integer("vocab", 0, 1, kBig);
  m.hidden = r.integer("hidden", 0, 1, kBig);
  m.layers = r.integer("layers", 0, 1, 1 << 16);
  m.dense_layers = r.integer("dense_layers", 0, 0, m.layers);
  m.dense_ff = r.integer("dense_ff", 0, 0, kBig);
  m.mtp_layers = r.integer("mtp_layers", 0, 0, 16);
  {
    const MapReader a(file, r.get("attention"), r.field("attention"),
                      {"kind", "heads", "kv_heads", "head_dim", "q_lora_rank", "kv_lora_rank", "qk_nope_dim",
                       "qk_rope_dim", "v_head_dim"});
    AttentionShape& s = m.attention;
    s.kind = a.choice("kind", "gqa", {"gqa", "mla"}) == "mla" ? AttentionKind::mla : AttentionKind::gqa;
    if (!a.has("heads")) a.fail("heads", "is required");
    s.heads = a.integer("heads", 0, 1, 1 << 20);
    if (s.kind == AttentionKind::gqa) {
      for (const char* key : {"kv_heads", "head_dim"})
        if (!a.has(key)) a.fail(key, "is required for gqa attention");
      s.kv_heads = a.integer("kv_heads", 0, 1, s.heads);
      s.head_dim = a.integer("head_dim", 0, 1, 1 << 16);
    } else {
      for (const char* key : {"kv_lora_rank", "qk_nope_dim", "qk_rope_dim", "v_head_dim"})
        if (!a.has(key)) a.fail(key, "is required for mla attention");
      s.q_lora_rank = a.integer("q_lora_rank", 0, 0, 1 << 20);
      s.kv_lora_rank = a.integer("kv_lora_rank", 0, 1, 1 << 20);
      s.qk_nope_dim = a.integer("qk_nope_dim", 0, 0, 1 << 16);
      s.qk_rope_dim = a.integer("qk_rope_dim", 0, 0, 1 << 16);
      s.v_head_dim = a.integer("v_head_dim", 0, 1, 1 << 16);
    }
  }
  if (r.has("moe")) {
    const MapReader e(file, r.get("moe"), r.field("moe"),
                      {"experts", "experts_per_token", "shared_experts", "expert_ff", "groups", "groups_per_token"});
    for (const char* key : {"experts", "experts_per_token", "expert_ff"})
      if (!e.has(key)) e.fail(key, "is required");
    m.experts = e.integer("experts", 0, 1, 1 << 20);
    m.experts_per_token = e.integer("experts_per_token", 0, 1, m.experts);
    m.shared_experts = e.integer("shared_experts", 0, 0, 1 << 10);
    m.expert_ff = e.integer("expert_ff", 0, 1, kBig);
    m.groups = e.integer("groups", 1, 1, m.experts);
    m.groups_per_token = e.integer("groups_per_token", m.groups, 1, m.groups);
    if (m.experts % m.groups != 0) e.fail("groups", fmt::format("must divide the {} experts", m.experts));
    if (m.dense_layers == m.layers) r.fail("dense_layers", "leaves no MoE layer although moe is given");
  } else if (m.dense_layers != m.layers) {
    if (r.has("dense_layers")) r.fail("dense_layers", "must equal layers for a model without moe");
    m.dense_layers = m.layers;
  }
  if (m.dense_layers > 0 && m.dense_ff == 0) r.fail("dense_ff", "is required when there are dense layers");
  return m;
}

Precision read_precision(const std::string& file, const YAML::Node& node, const std::string& path) {
  const MapReader r(file, node, path, {"weights", "activations", "kv_cache"});
  Precision p;
  const std::vector<std::string> formats = {"f32", "bf16", "f16", "fp8", "fp8_e4m3", "int8", "int4",
                                            "q8_0", "q6_k", "q5_0", "q4_k", "q4_0"};
  p.weights = r.choice("weights", "bf16", formats);
  p.activations = r.choice("activations", "bf16", {"f32", "bf16", "f16", "fp8", "fp8_e4m3", "int8", "q8_0"});
  p.kv_cache = r.choice("kv_cache", "bf16", {"f32", "bf16", "f16", "fp8", "fp8_e4m3", "q8_0"});
  return p;
}

}  // namespace moe::sim
