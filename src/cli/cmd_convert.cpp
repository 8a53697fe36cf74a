// moengine convert: a Hugging Face checkpoint directory to GGUF, no Python needed.
#include "checkpoint/convert.h"
#include "cli/commands.h"
#include "cli/progress.h"

namespace moe::cli {
namespace {

struct ConvertArgs {
  std::string dir;
  std::string out;
  std::string type = "auto";
};

void run(const ConvertArgs& a) {
  const WeightFormat format = parse_weight_format(a.type);
  ProgressBar bar("converting " + a.dir);
  convert_hf_to_gguf(a.dir, a.out, format, [&](uint64_t done, uint64_t total) { bar.update_bytes(done, total); });
  bar.done("wrote " + a.out);
}

}  // namespace

void register_convert(CLI::App& app) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* cmd = app.add_subcommand(
      "convert", "Convert a Hugging Face checkpoint directory (safetensors, BF16 or FP8) to a GGUF file");
  cmd->footer(
      "Examples:\n"
      "  moengine convert ./DeepSeek-V2-Lite --out v2-lite-q8_0.gguf --type q8_0\n"
      "  moengine convert ./Qwen3-30B-A3B --out qwen3-30b-bf16.gguf --type bf16\n"
      "The file follows llama.cpp's conventions (metadata keys, tensor names, split MLA kv_b), so llama.cpp loads "
      "it too. MTP layers are skipped.");
  cmd->add_option("dir", args->dir, "Checkpoint directory: config.json, tokenizer.json, *.safetensors")->required();
  cmd->add_option("--out,-o", args->out, "Output .gguf path")->required();
  cmd->add_option("--type", args->type,
                  "Type of the weight matrices: q8_0, q4_K, q5_K, q6_K, q4_0, q5_0, bf16, f16, f32, or auto (BF16/F16/F32 "
                  "as stored, FP8 to q8_0); norms and routers stay f32, rows a type's block does not divide fall "
                  "back to q5_0/q5_1/q8_0/f16")
      ->capture_default_str();
  cmd->callback([args] { run(*args); });
}

}  // namespace moe::cli
