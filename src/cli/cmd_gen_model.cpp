// moengine gen-model: deterministic random-weight GGUF models for tests and benchmarks.
#include <fmt/format.h>

#include <cstdio>

#include "cli/commands.h"
#include "cli/progress.h"
#include "core/error.h"
#include "gen/gen_model.h"
#include "tokenizer/gguf_vocab.h"

namespace moe::cli {
namespace {

struct GenArgs {
  std::string arch = "deepseek2";
  std::string preset = "tiny";
  std::string type;
  std::string format = "gguf";
  int64_t shard_mib = 2048;
  std::string out;
  uint64_t seed = 42;
  int64_t layers = 0;
  int64_t nextn_layers = 0;
  int64_t vocab = 0;
  std::string tokenizer;
  std::string mla_form = "split";
  std::string gating = "v3";
  bool no_q_lora = false;
  float yarn = 0.0f;
  float expert_skew = 0.0f;
  int64_t skew_by_token = 0;
};

void run(const GenArgs& a) {
  Arch arch;
  if (a.arch == "deepseek2") arch = Arch::Deepseek2;
  else if (a.arch == "qwen3moe") arch = Arch::Qwen3Moe;
  else fail("--arch '{}' is not supported (deepseek2, qwen3moe)", a.arch);
  if (a.format != "gguf" && a.format != "hf") fail("--format must be gguf or hf");
  const bool hf = a.format == "hf";
  const std::string type = !a.type.empty() ? a.type : hf ? "bf16" : "f32";
  GenSpec g = gen_preset(arch, a.preset);
  g.seed = a.seed;
  HfExportOptions hf_options;
  if (hf) {
    if (type != "bf16" && type != "fp8") fail("--format hf writes --type bf16 or fp8, not '{}'", type);
    hf_options.dtype = type == "fp8" ? StDtype::F8_E4M3 : StDtype::BF16;
    if (a.shard_mib < 1) fail("--shard-mib must be at least 1");
    hf_options.max_shard_bytes = uint64_t(a.shard_mib) << 20;
  } else if (type == "q4_K_M" || type == "q4_k_m") {
    g.q4_k_m = true;
  } else if (auto t = parse_type_name(type); t && *t != GgmlType::F8_E4M3_B128) {
    g.type = *t;
  } else {
    fail("--type '{}' is not supported (f32, f16, bf16, q8_0, q4_0, q5_0, q4_1, q5_1, q4_K, q5_K, q6_K, q4_K_M)", type);
  }
  if (a.layers > 0) g.n_layer = a.layers;
  if (a.nextn_layers < 0 || a.nextn_layers > 1) fail("--nextn-layers must be 0 or 1, got {}", a.nextn_layers);
  if (a.nextn_layers > 0 && arch != Arch::Deepseek2) fail("--nextn-layers: MTP layers are written for deepseek2 only");
  g.n_nextn = a.nextn_layers;
  if (a.vocab > 0) g.n_vocab = a.vocab;
  if (!a.tokenizer.empty()) {
    if (a.vocab > 0) fail("give --vocab or --tokenizer, not both: the tokenizer sets the vocabulary size");
    g.vocab = std::make_shared<GgufVocab>(gguf_vocab_from_spec(read_hf_tokenizer_spec(a.tokenizer)));
    g.n_vocab = int64_t(g.vocab->tokens.size());
  }
  if (a.mla_form != "split" && a.mla_form != "combined") fail("--mla-form must be split or combined");
  g.mla_split = a.mla_form == "split";
  if (a.gating != "v3" && a.gating != "v2") fail("--gating must be v3 or v2");
  g.v3_gating = a.gating == "v3";
  if (a.no_q_lora) g.q_lora_rank = 0;
  g.yarn_factor = a.yarn;
  g.expert_skew = a.expert_skew;
  g.skew_token_groups = a.skew_by_token;
  g.name += "-" + type;

  std::fprintf(stderr, "gen-model: %s, %.2fB parameters (%.2fB active per token), type %s, seed %llu\n",
               g.name.c_str(), double(gen_parameter_count(g, false)) / 1e9, double(gen_parameter_count(g, true)) / 1e9,
               type.c_str(), static_cast<unsigned long long>(g.seed));
  ProgressBar bar("writing " + a.out);
  if (hf) {
    write_generated_hf(g, a.out, hf_options, [&](double f) { bar.update(f); });
    bar.done();
    return;
  }
  write_generated_model(g, a.out, [&](uint64_t done, uint64_t total) { bar.update_bytes(done, total); });
  bar.done();
}

}  // namespace

void register_gen_model(CLI::App& app) {
  auto args = std::make_shared<GenArgs>();
  CLI::App* cmd = app.add_subcommand(
      "gen-model", "Write a deterministic random-weight model as GGUF or as a Hugging Face checkpoint directory");
  cmd->footer(
      "Examples:\n"
      "  moengine gen-model --arch deepseek2 --preset tiny --out tiny.gguf\n"
      "  moengine gen-model --arch deepseek2 --preset mid --type q8_0 --out mid-q8_0.gguf\n"
      "  moengine gen-model --arch deepseek2 --preset tiny --tokenizer deepseek/tokenizer.json --out tiny-dsvocab.gguf\n"
      "  moengine gen-model --arch deepseek2 --preset tiny --format hf --type fp8 --out tiny-fp8/\n"
      "  moengine gen-model --arch qwen3moe --preset tiny --expert-skew 1.2 --out qwen-tiny-skew.gguf\n"
      "  moengine gen-model --arch deepseek2 --preset tiny --expert-skew-by-token 2 --out tiny-bytoken.gguf\n"
      "The same options and seed always give the same bytes.");
  cmd->add_option("--arch", args->arch, "Architecture: deepseek2 or qwen3moe")->capture_default_str();
  cmd->add_option("--preset", args->preset,
                  "Size: tiny (tests) or mid (DeepSeek-V2-Lite-like, ~2.6B total / 0.5B active)")
      ->capture_default_str();
  cmd->add_option("--format", args->format,
                  "gguf (one file), or hf: a Hugging Face checkpoint directory (config.json, tokenizer.json, "
                  "safetensors shards) with the weights of the bf16 GGUF twin of the same options")
      ->capture_default_str();
  cmd->add_option("--type", args->type,
                  "Weight type. gguf (default f32): f32 f16 bf16 q8_0 q4_0 q5_0 q4_1 q5_1 q4_K q5_K q6_K, or q4_K_M "
                  "(q4_K with q6_K for output and ffn_down); norms and routers stay f32, rows a type's block does not "
                  "divide fall back to q5_0/q5_1/q8_0/f16. hf (default bf16): bf16, or fp8 (e4m3 with one scale per "
                  "128x128 block, as DeepSeek-V3)");
  cmd->add_option("--shard-mib", args->shard_mib, "hf: the largest safetensors shard, in MiB")->capture_default_str();
  cmd->add_option("--out,-o", args->out, "Output .gguf path, or directory for --format hf")->required();
  cmd->add_option("--seed", args->seed, "Random seed")->capture_default_str();
  cmd->add_option("--layers", args->layers, "Override the number of layers");
  cmd->add_option("--nextn-layers", args->nextn_layers,
                  "deepseek2: DeepSeek's multi-token-prediction layers after the decoder layers (0 or 1), as llama.cpp "
                  "stores them (blk.N.nextn.*), for speculative decoding with method mtp")
      ->capture_default_str();
  cmd->add_option("--vocab", args->vocab, "Override the vocabulary size");
  cmd->add_option("--tokenizer", args->tokenizer,
                  "Embed this tokenizer.json's vocabulary, merges and chat template (tokenizer_config.json beside it) "
                  "instead of the synthetic one; the vocabulary size becomes its size");
  cmd->add_option("--mla-form", args->mla_form,
                  "deepseek2: split (attn_k_b + attn_v_b, newer files) or combined (attn_kv_b, older files)")
      ->capture_default_str();
  cmd->add_option("--gating", args->gating,
                  "deepseek2: v3 (sigmoid + bias + expert groups) or v2 (softmax)")
      ->capture_default_str();
  cmd->add_flag("--no-q-lora", args->no_q_lora, "deepseek2: project queries directly (V2-Lite)");
  cmd->add_option("--yarn", args->yarn, "deepseek2: write YaRN rope scaling with this factor");
  cmd->add_option("--expert-skew", args->expert_skew,
                  "Skewed expert load, S >= 0 (default 0: none). Each MoE layer ranks its experts in a seeded random "
                  "order and top-k selection favours the expert of rank r about as (r+1)^-S, a Zipf law: at 1.2 the "
                  "hottest expert takes about 2.5x the mean load with 8 experts top-2, 7-10x with 64. deepseek2 v3 "
                  "gating does it through exp_probs_b.bias; qwen3moe and deepseek2 v2, which have no bias, through a "
                  "routing channel, a residual coordinate that every token embedding sets and only the routers read")
      ->capture_default_str();
  cmd->add_option("--expert-skew-by-token", args->skew_by_token,
                  "Expert load that follows the prompt, G from 2 to the expert count (default 0: off). The vocabulary "
                  "splits into G contiguous id ranges and each MoE layer's experts into G contiguous groups; tokens of "
                  "range g pick experts of group g (nearly all of them in the first MoE layers, fewer in deep "
                  "deepseek2 models), through one routing channel per range");
  cmd->callback([args] { run(*args); });
}

}  // namespace moe::cli
