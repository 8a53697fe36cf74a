#include "cli/model_loading.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "checkpoint/checkpoint.h"
#include "cli/progress.h"

namespace moe::cli {
double resident_mib() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0.0;
  char line[256];
  long kib = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
  std::fclose(f);
  return double(kib) / 1024.0;
}

void add_model_options(CLI::App& cmd, ModelArgs& args) {
  cmd.add_option("--model,-m", args.path,
                 "A GGUF file, or a Hugging Face checkpoint directory (config.json, tokenizer.json, *.safetensors)")
      ->required();
  cmd.add_option("--weight-type", args.weight_type,
                 "Checkpoint directories: how weight matrices are held once loaded. auto keeps BF16/F16/F32 as "
                 "stored and re-quantizes FP8 to q8_0; fp8 keeps FP8 blocks as they are (dequantized on the fly); "
                 "or a type (q8_0, q4_K, bf16, f16, f32, ...) for every matrix")
      ->capture_default_str();
}

std::unique_ptr<Model> load_model_with_progress(const ModelArgs& args, bool read_routed_experts) {
  const WeightFormat format = parse_weight_format(args.weight_type);
  const auto start = std::chrono::steady_clock::now();
  const bool converting = is_hf_checkpoint(args.path);
  ProgressBar bar((converting ? "loading checkpoint " : "loading ") + args.path);
  auto model = load_model(args.path, format, [&](double f) { bar.update(f); }, read_routed_experts);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double moved = double(model->moved_weight_bytes()) / 1048576.0;
  const double regrouped_mib = double(model->regrouped_weight_bytes()) / 1048576.0;
  const std::string moved_note =
      model->moved_weight_bytes() == 0 ? ""
      : model->regrouped_weight_bytes() == 0
          ? fmt::format(" ({:.0f} MiB moved into huge pages)", moved)
          : fmt::format(" ({:.0f} MiB moved into huge pages, {:.0f} MiB of them regrouped for the AVX-512 kernels)",
                        moved, regrouped_mib);
  bar.done(fmt::format("{:.0f} MiB of weights in {:.1f} s, {:.0f} MiB resident{}{}", double(model->total_weight_bytes()) / 1048576.0,
                       secs, resident_mib(), moved_note, read_routed_experts ? "" : " (routed experts not read yet)"));
  std::fprintf(stderr, "model: %s\n", model->config().summary().c_str());
  return model;
}

}  // namespace moe::cli
