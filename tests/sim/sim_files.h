#pragma once
// Config files for the simulator tests: a toy device and model whose step times are easy to
// work out by hand, written into a fresh temporary directory.
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace moe::sim::testing {

inline std::string write_config(const std::string& name, const std::string& text) {
  const char* base = std::getenv("MOENGINE_TEST_TMP");
  const std::filesystem::path dir =
      std::filesystem::path(base ? base : std::filesystem::temp_directory_path().string()) / ("sim-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path p = dir / name;
  std::ofstream(p) << text;
  return p.string();
}

// 1 TFLOP/s bf16, 100 GB/s, every efficiency 1, no overheads: a step's time is plain
// arithmetic on the model's shape.
inline const char* kToyHardware = R"(hardware:
  name: toy
  devices_per_node: 4
  flops: {bf16: 1e12}
  mem_bw: 1e11
  mem_gib: 16
  scale_up: {bw: 1e10}
  scale_out: {bw: 1e9}
)";

// H 256, 4 layers of GQA (4 heads, 2 KV heads of 64) and 8 experts of 512, top 2.
inline const char* kToyModel = R"(model:
  name: toy
  vocab: 1000
  hidden: 256
  layers: 4
  attention: {kind: gqa, heads: 4, kv_heads: 2, head_dim: 64}
  moe: {experts: 8, experts_per_token: 2, expert_ff: 512}
)";

}  // namespace moe::sim::testing
