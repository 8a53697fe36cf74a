#pragma once
// A cluster simulation's configuration file (docs/simulator.md has the schema, with every
// field's unit and default): the hardware, the model, the deployment's pools and policies,
// the traffic and the latency targets.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "proxy/policy/route.h"
#include "sim/profiles.h"

namespace moe::sim {

// One pool of identical instances (P, D or unified). An instance is one expert-parallel
// group: `devices` devices, `attention_dp` data-parallel attention ranks of `attention_tp`
// devices each, experts spread over `ep` devices with `redundant_experts` spare slots.
struct PoolConfig {
  int32_t instances = 1;
  int32_t devices = 1;
  int32_t attention_dp = 1;
  int32_t attention_tp = 1;
  int32_t ep = 1;
  int32_t redundant_experts = 0;
  std::string placement = "moengine";      // the planner: moengine or eplb
  int64_t max_batched_tokens = 8192;       // per attention rank and step
  int32_t max_sequences_per_device = 256;  // sequences an attention rank holds: this times attention_tp
  double kv_cache_gib = 0;                 // per device; 0: what the weights leave of mem_util * mem_gib
  double mem_util = 0.9;
  int32_t block_size = 64;

  int32_t nodes(int32_t devices_per_node) const { return (devices + devices_per_node - 1) / devices_per_node; }
  int32_t max_sequences_per_rank() const { return max_sequences_per_device * attention_tp; }
};

struct MtpConfig {
  int32_t draft_tokens = 0;  // 0: no speculative decoding
  double acceptance = 0;     // of each draft token, given the ones before it were accepted
  // Tokens a decode step yields per sequence on average: 1 + a + a^2 + ... + a^k.
  double tokens_per_step() const;
};

struct Deployment {
  std::optional<PoolConfig> prefill, decode, unified;
  routing::Policy policy = routing::Policy::cost;
  bool kv_over_scale_up = false;  // kv_transfer: scale_up (same node) or scale_out
  int32_t micro_batches = 1;
  MtpConfig mtp;
};

// A distribution of token counts.
struct Lengths {
  enum class Kind { fixed, uniform, lognormal, trace } kind = Kind::fixed;
  double a = 0, b = 0;  // fixed: a; uniform: [a, b]; lognormal: mean a, sigma b (of the log)
};

struct Arrival {
  enum class Kind { poisson, gamma, closed, trace } kind = Kind::poisson;
  double rate = 1;         // requests/s (poisson, gamma)
  double cv = 1;           // gamma: coefficient of variation of the gaps
  int32_t clients = 1;     // closed
  double think_s = 0;      // closed: mean of a client's exponential pause between an answer and its next request
  // trace: a proxy access log or a bench serve result file; closed (lengths_from): the
  // requests' lengths, sent in the order the file sent them
  std::string trace_file;
};

struct Workload {
  Arrival arrival;
  Lengths prompt_tokens{Lengths::Kind::fixed, 1024, 0};
  Lengths output_tokens{Lengths::Kind::fixed, 128, 0};
  double prefix_hit_rate = 0;  // share of each prompt found in a cache every instance reads
  // Shared-prefix groups: each request starts with one of `groups` prefixes of
  // `prefix_tokens` tokens (0 groups: none), which instances cache in their own blocks.
  int32_t prefix_groups = 0;
  int64_t prefix_tokens = 0;
  double expert_skew = 1.0;     // synthetic expert load: Zipf exponent
  std::string expert_trace;     // or a .npy trace [steps, layers, experts]
  double duration_s = 0;        // arrivals stop after this; 0: `requests` decides
  int64_t requests = 0;         // arrivals stop after this many; 0: duration_s decides
  double warmup_s = 0;          // throughput is measured from here to the end of arrivals
  double timeout_s = 0;         // a request still waiting for a first token after this is rejected; 0: never
  uint64_t seed = 1;
};

struct Slo {
  double ttft_s = 0;  // 0: no target
  double tpot_s = 0;
};

struct SimConfig {
  std::string file;
  Hardware hardware;
  ModelShape model;
  Precision precision;
  Deployment deployment;
  Workload workload;
  Slo slo;
};

// Resolves `model: {gguf: FILE}` or `{checkpoint: DIR}` (kind "gguf" or "checkpoint")
// by reading the file's metadata; the CLI passes one (the simulator itself does not load
// model files).
using ModelFileReader = std::function<ModelShape(const std::string& kind, const std::string& path)>;

// The parsed file as a tree, for sweeps to change a field before reading it.
YAML::Node load_config_tree(const std::string& path);
// Sets `key` (a dotted path, e.g. deployment.decode.instances) to a YAML value; missing
// maps on the way are created. Throws moe::Error for a path through a non-map.
void set_field(YAML::Node& root, const std::string& key, const std::string& value);
// Reads and checks everything; errors read "FILE:LINE:COLUMN: FIELD: what is wrong".
// Profile names are looked up as <dir>/hardware/NAME.yaml and <dir>/models/NAME.yaml for
// each dir of profile_dirs().
SimConfig read_config(const std::string& path, const YAML::Node& root, const ModelFileReader& read_model_file);
SimConfig read_config(const std::string& path, const ModelFileReader& read_model_file);
// The directories profiles are looked up in: MOENGINE_SIM_PROFILES (colon-separated), the
// config file's own directory, then the project's configs/sim.
std::vector<std::string> profile_dirs(const std::string& config_path);

}  // namespace moe::sim
