#pragma once
// The data the simulator's cost model runs on: what a device can do (Hardware), the shape
// of the model it serves (ModelShape) and the number formats it serves it in (Precision).
// Profiles are YAML files under configs/sim/ (docs/simulator.md lists every field); every
// efficiency and overhead carries the place it came from in `sources`.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <string>

namespace moe::sim {

// One direction of a device's link, as all-to-all and KV transfers see it.
struct Link {
  double bw = 0;         // bytes/s
  double latency_s = 0;  // per message
};

// Achieved over peak, per kind of operation.
struct Efficiency {
  double gemm = 1;               // compute-bound GEMMs
  double memory = 1;             // weight-streaming (memory-bound) GEMMs
  double attention_compute = 1;  // compute-bound attention
  double attention_memory = 1;   // memory-bound (decode) attention
  double scale_up = 1;           // all-to-all over the node's links
  double scale_out = 1;          // all-to-all between nodes
};

struct Hardware {
  std::string name, description;
  int32_t devices_per_node = 1;
  std::map<std::string, double> flops;  // dense peak per device by compute type (f32, bf16, fp8, int8)
  double mem_bw = 0;                    // bytes/s per device
  double mem_gib = 0;
  Link scale_up, scale_out;
  Efficiency efficiency;
  double layer_overhead_s = 0;  // per transformer layer per step: launches, synchronisation
  double step_overhead_s = 0;   // per engine step: scheduling, sampling, output
  double wake_s = 0;            // from new work at an idle instance to its step's start
  std::map<std::string, std::string> sources;

  // Throws moe::Error naming the profile when it has no figure for `type`.
  double peak_flops(const std::string& type) const;
  // The type attention runs in: bf16 where the device has it, else f32.
  std::string attention_type() const;
};

enum class AttentionKind { mla, gqa };

struct AttentionShape {
  AttentionKind kind = AttentionKind::gqa;
  int64_t heads = 0;
  int64_t kv_heads = 0, head_dim = 0;  // gqa
  int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope_dim = 0, qk_rope_dim = 0, v_head_dim = 0;  // mla
};

struct ModelShape {
  std::string name, description, source;
  int64_t vocab = 0, hidden = 0;
  int64_t layers = 0;        // without MTP layers
  int64_t dense_layers = 0;  // leading layers with a dense FFN
  int64_t dense_ff = 0;
  AttentionShape attention;
  int64_t experts = 0, experts_per_token = 0, shared_experts = 0, expert_ff = 0;
  int64_t groups = 1, groups_per_token = 1;
  int64_t mtp_layers = 0;

  int64_t moe_layers() const { return experts > 0 ? layers - dense_layers : 0; }
  // Weights of one layer's attention (projections, norms not counted).
  double attention_params() const;
  double expert_params() const { return 3.0 * double(hidden) * double(expert_ff); }
  double dense_ffn_params() const { return 3.0 * double(hidden) * double(dense_ff); }
  // KV cache values one token stores per layer (MLA: the latent and the rope key).
  double kv_values_per_token_layer() const;
  // Attention FLOPs per (query, key) pair and layer: MLA absorbed (the latent as keys and
  // values) and expanded (per-head keys and values, as prefill kernels run it).
  double absorbed_pair_flops() const;
  double expanded_pair_flops() const;
  // MLA expanded: FLOPs to expand one context token's latent into per-head keys and values.
  double expand_flops_per_token() const;
  double total_params() const;
  double active_params() const;
};

struct Precision {
  std::string weights = "bf16", activations = "bf16", kv_cache = "bf16";
  double weight_bytes() const;  // per parameter
  double kv_bytes() const;      // per KV value
  // The compute type GEMMs run in (a flops key of the hardware).
  std::string compute_type() const;
};

// From a parsed YAML map; errors name file, line and field under `path`.
Hardware read_hardware(const std::string& file, const YAML::Node& node, const std::string& path);
ModelShape read_model_shape(const std::string& file, const YAML::Node& node, const std::string& path);
Precision read_precision(const std::string& file, const YAML::Node& node, const std::string& path);
// Bytes per value of a number format named in a precision field; 0 for an unknown name.
double format_bytes(const std::string& name);

}  // namespace moe::sim
