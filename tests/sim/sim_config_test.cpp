// Configuration files: profiles by name, defaults, and errors that name the file, the line
// and the field.
#include <gtest/gtest.h>

#include <regex>

#include "core/error.h"
#include "sim/sim_config.h"
#include "sim_files.h"

namespace moe::sim {
namespace {

using testing::kToyHardware;
using testing::kToyModel;
using testing::write_config;

const char* kDeployment = R"(deployment:
  prefill: {instances: 1, devices: 4}
  decode: {instances: 1, devices: 4}
)";
const char* kWorkload = R"(workload:
  arrival: {poisson: 10}
  duration_s: 5
)";

// The error text read_config throws for this file.
std::string error_of(const std::string& text) {
  const std::string path = write_config("bad.yaml", text);
  try {
    read_config(path, {});
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(SimConfig, ProfilesByNameAndDefaults) {
  const std::string path = write_config("named.yaml", R"(hardware: h800
model: deepseek-v3
precision: {weights: fp8, activations: fp8}
deployment:
  prefill: {instances: 2, devices: 32, redundant_experts: 32}
  decode: {devices: 144, redundant_experts: 32, max_sequences_per_device: 128}
  mtp: {draft_tokens: 1, acceptance: 0.85}
workload:
  arrival: {gamma: {rate: 20, cv: 2}}
  requests: 100
)");
  const SimConfig c = read_config(path, {});
  EXPECT_EQ(c.hardware.name, "h800");
  EXPECT_EQ(c.hardware.devices_per_node, 8);
  EXPECT_DOUBLE_EQ(c.hardware.peak_flops("fp8"), 1979e12);
  EXPECT_FALSE(c.hardware.sources.empty());
  EXPECT_EQ(c.model.moe_layers(), 58);
  // 671B parameters in all, 37B active: the model card's figures.
  EXPECT_NEAR(c.model.total_params() / 1e9, 671, 6);
  EXPECT_NEAR(c.model.active_params() / 1e9, 37.5, 1);
  EXPECT_EQ(c.deployment.prefill->attention_dp, 32);
  EXPECT_EQ(c.deployment.prefill->ep, 32);
  EXPECT_EQ(c.deployment.decode->instances, 1);
  EXPECT_EQ(c.deployment.policy, routing::Policy::cost);
  EXPECT_DOUBLE_EQ(c.deployment.mtp.tokens_per_step(), 1.85);
  EXPECT_EQ(c.precision.kv_cache, "bf16");
  EXPECT_EQ(c.workload.arrival.kind, Arrival::Kind::gamma);
  EXPECT_DOUBLE_EQ(c.workload.arrival.cv, 2);
}

TEST(SimConfig, ErrorsNameFileLineAndField) {
  const std::string base = std::string(kToyHardware) + kToyModel;
  struct Case {
    std::string text, line_and_field, message;
  };
  const std::vector<Case> cases = {
      {base + "deployment:\n  prefill: {instances: 1, devices: 4, instancez: 2}\n  decode: {devices: 4}\n" + kWorkload,
       ":17:39: deployment.prefill.instancez", "unknown key"},
      {base + "deployment:\n  prefill: {devices: 4}\n  decode: {devices: 3}\n" + kWorkload,
       ":18:11: deployment.decode.redundant_experts", "8 experts + 0 redundant do not divide evenly over ep 3"},
      {base + kDeployment + "  policy: random\n" + kWorkload, ":19:11: deployment.policy", "unknown routing policy 'random'"},
      {base + kDeployment + "workload:\n  duration_s: 5\n", ":20:3: workload.arrival", "is required"},
      {base + kDeployment + "workload:\n  arrival: {poisson: 10}\n  prefix_hit_rate: 1.5\n  duration_s: 5\n",
       ":21:20: workload.prefix_hit_rate", "must be in [0, 1)"},
      {base + kDeployment + "workload:\n  arrival: {poisson: 10}\n  prompt_tokens: {uniform: [50, 10]}\n  duration_s: 5\n",
       ":21:28: workload.prompt_tokens.uniform", "max must not be below min"},
      {base + kDeployment + "workload:\n  arrival: {poisson: 10}\n", ":20:3: workload.duration_s", "or requests is required"},
      {std::string("hardware: no-such-gpu\n") + kToyModel + kDeployment + kWorkload, ":1:11: hardware",
       "no hardware profile named 'no-such-gpu'"},
      {std::string(kToyHardware) + "model:\n  name: m\n  vocab: 10\n  hidden: 8\n  layers: 2\n  attention: {kind: mla, heads: 2}\n" +
           kDeployment + kWorkload,
       ":14:14: model.attention.kv_lora_rank", "is required for mla attention"},
  };
  for (const Case& c : cases) {
    const std::string e = error_of(c.text);
    SCOPED_TRACE(e);
    EXPECT_NE(e.find("bad.yaml" + c.line_and_field), std::string::npos);
    EXPECT_NE(e.find(c.message), std::string::npos);
  }
}

TEST(SimConfig, SetFieldChangesOneValueForASweep) {
  const std::string path = write_config("sweep.yaml", std::string(kToyHardware) + kToyModel + kDeployment + kWorkload);
  YAML::Node tree = load_config_tree(path);
  set_field(tree, "deployment.decode.instances", "3");
  set_field(tree, "deployment.policy", "round_robin");
  set_field(tree, "workload.arrival.poisson", "42.5");
  const SimConfig c = read_config(path, tree, {});
  EXPECT_EQ(c.deployment.decode->instances, 3);
  EXPECT_EQ(c.deployment.prefill->instances, 1);
  EXPECT_EQ(c.deployment.policy, routing::Policy::round_robin);
  EXPECT_DOUBLE_EQ(c.workload.arrival.rate, 42.5);
  EXPECT_THROW(set_field(tree, "workload.arrival.poisson.x", "1"), Error);
}

}  // namespace
}  // namespace moe::sim
