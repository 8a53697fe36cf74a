// moengine generate: run one prompt through a model offline and print the continuation.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/kv_dtype_arg.h"
#include "cli/speculative_arg.h"
#include "cli/commands.h"
#include "cli/expert_parallel_args.h"
#include "cli/model_loading.h"
#include "cli/token_ids_arg.h"
#include "core/error.h"
#include "core/npy.h"
#include "core/thread_pool.h"
#include "engine/engine_core.h"
#include "engine/mtp_drafter.h"
#include "engine/sampling.h"
#include "engine/single_sequence.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/stream_decoder.h"

namespace moe::cli {
namespace {

struct GenerateArgs {
  ModelArgs model;
  std::string prompt;
  std::string prompt_ids;
  int max_tokens = 32;
  float temperature = 0.0f;
  uint64_t seed = 0;
  int threads = 0;
  bool json = false;
  bool ignore_eos = false;
  std::string logits_out;
  KvDtype kv_dtype = kKvDtypeAuto;
  SpeculativeConfig speculative;
  ExpertParallelArgs ep;
};

struct Generated {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // with --logits-out
  double prefill_s = 0, decode_s = 0;
  int64_t drafted = 0, accepted = 0;
};

// The plain path: prefill, then one decode step per token.
Generated generate_plainly(const GenerateArgs& a, Model& model, const std::vector<int32_t>& prompt, ThreadPool& pool) {
  const ModelConfig& c = model.config();
  SingleSequence seq(model, int64_t(prompt.size()) + a.max_tokens, a.kv_dtype);
  SamplingParams sp;
  sp.temperature = a.temperature;
  sp.seed = a.seed;  // always seeded, so the same command gives the same tokens
  Sampler sampler(sp, prompt);
  const bool keep_logits = !a.logits_out.empty();
  Generated g;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<float>& pl = seq.prefill(prompt, keep_logits, pool);
  if (keep_logits) g.logits = pl;
  const float* last = pl.data() + (keep_logits ? (int64_t(prompt.size()) - 1) * c.n_vocab : 0);
  int32_t next = sampler.sample(last, c.n_vocab);
  sampler.accept(next);
  const auto t1 = std::chrono::steady_clock::now();
  g.tokens.push_back(next);
  while (int(g.tokens.size()) < a.max_tokens && (a.ignore_eos || next != c.eos_id)) {
    const std::vector<float>& l = seq.decode(next, pool);
    if (keep_logits) g.logits.insert(g.logits.end(), l.begin(), l.end());
    next = sampler.sample(l.data(), c.n_vocab);
    sampler.accept(next);
    g.tokens.push_back(next);
  }
  g.prefill_s = std::chrono::duration<double>(t1 - t0).count();
  g.decode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  return g;
}

// With --speculative-config: the prompt as the serving engine's only request, each decode
// step verifying the drafter's tokens.
Generated generate_speculatively(const GenerateArgs& a, Model& model, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                                 ThreadPool& pool) {
  EngineCore core(model, tok, one_request_config(int64_t(prompt.size()), a.max_tokens, a.kv_dtype, a.speculative), pool);
  GenerateParams p;
  p.sampling.temperature = a.temperature;
  p.sampling.seed = a.seed;
  p.max_tokens = a.max_tokens;
  p.ignore_eos = a.ignore_eos;
  Generated g;
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<std::chrono::steady_clock::time_point> first;
  core.add(0, prompt, p, [&](RequestOutput&& out) {
    if (!first && !out.tokens.empty()) first = std::chrono::steady_clock::now();
    for (const TokenOutput& t : out.tokens) g.tokens.push_back(t.token);
    if (out.finished) {
      if (out.finish == FinishKind::kError) fail("generate: {}", out.error);
      g.drafted = out.n_draft_tokens;
      g.accepted = out.n_accepted_tokens;
    }
  });
  while (core.has_work()) core.step();
  const auto t2 = std::chrono::steady_clock::now();
  g.prefill_s = std::chrono::duration<double>(first.value_or(t2) - t0).count();
  g.decode_s = std::chrono::duration<double>(t2 - first.value_or(t2)).count();
  return g;
}

// Text of generated ids, decoded as a stream would be; control tokens add no text.
std::string ids_to_text(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  StreamDecoder d(tok);
  std::string text;
  for (int32_t id : ids) text += d.push(id);
  return text + d.finish();
}

// A rank other than 0: rank 0 runs the prompt, this one computes its experts' share of its
// steps, and of the MTP layer's rounds after each when rank 0 drafts with the layer.
void follow_group_steps(Model& model, const GenerateArgs& a, ThreadPool& pool) {
  if (!speculative_uses_mtp(a.speculative) || model.n_mtp_layers() <= 0) {
    while (model.step_idle(pool)) {
    }
    return;
  }
  const int32_t k = a.speculative.num_speculative_tokens;
  KvStore kv = model.make_kv_store(16, 1 + MtpDrafter::scratch_blocks(k, 16, 1), a.kv_dtype, /*with_mtp=*/true);
  MtpDrafter mtp(model, kv, k, 1, 1);
  while (model.step_idle(pool)) mtp.idle_rounds(pool);
}

void run(const GenerateArgs& a) {
  if (a.prompt.empty() == a.prompt_ids.empty()) fail("give exactly one of --prompt or --prompt-ids");
  if (a.max_tokens < 1) fail("--max-tokens must be at least 1");
  EpGroup group = join_expert_parallel_group(a.ep);
  // A rank of a group reads only its own experts' weights (attach_expert_parallel).
  auto model = load_model_with_progress(a.model, !group.comm);
  attach_expert_parallel(group, a.ep, *model);
  const ModelConfig& c = model->config();
  std::optional<Tokenizer> tok;
  if (model->file().has("tokenizer.ggml.tokens")) tok.emplace(tokenizer_spec_from_gguf(model->file()));
  else if (!a.prompt.empty()) fail("{}: the file has no tokenizer (tokenizer.ggml.tokens); use --prompt-ids", a.model.path);
  const std::vector<int32_t> prompt = a.prompt.empty() ? parse_token_ids(a.prompt_ids, "--prompt-ids", c.n_vocab) : tok->encode(a.prompt, true);
  if (prompt.empty()) fail("--prompt: the text encodes to no tokens");
  ThreadPool pool(a.threads);
  if (group.rank() != 0) {
    follow_group_steps(*model, a, pool);
    finish_expert_parallel_run(group, a.ep);
    return;
  }

  if (a.speculative.enabled() && !a.logits_out.empty()) fail("--logits-out and --speculative-config do not go together");
  if (a.speculative.enabled() && !tok) fail("{}: --speculative-config runs the serving engine, which needs the file's tokenizer", a.model.path);
  const Generated g = a.speculative.enabled() ? generate_speculatively(a, *model, *tok, prompt, pool) : generate_plainly(a, *model, prompt, pool);
  const std::vector<int32_t>& out = g.tokens;
  if (group.ep) group.ep->join_step(moe::ExpertParallel::StepWork::none);
  finish_expert_parallel_run(group, a.ep);

  std::fprintf(stderr, "prefill: %zu tokens in %.3f s (%.1f tok/s); decode: %zu tokens in %.3f s (%.1f tok/s); %d threads\n",
               prompt.size(), g.prefill_s, double(prompt.size()) / g.prefill_s, out.size() - 1, g.decode_s,
               out.size() > 1 ? double(out.size() - 1) / g.decode_s : 0.0, pool.size());
  if (a.speculative.enabled()) {
    std::fprintf(stderr, "speculative decoding (%s): %lld drafted tokens, %lld accepted (%.1f%%)\n", speculative_method_name(a.speculative.method),
                 (long long)g.drafted, (long long)g.accepted, g.drafted > 0 ? 100.0 * double(g.accepted) / double(g.drafted) : 0.0);
  }

  if (!a.logits_out.empty()) {
    const int64_t rows = int64_t(g.logits.size()) / c.n_vocab;
    write_npy_f32(a.logits_out, {rows, c.n_vocab}, g.logits.data());
  }
  const std::string text = tok ? ids_to_text(*tok, out) : std::string();
  if (a.json) {
    nlohmann::ordered_json j = {{"prompt_ids", prompt}, {"output_ids", out}, {"text", text}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("%s\n", text.c_str());
  }
}

}  // namespace

void register_generate(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate a continuation of one prompt offline");
  cmd->footer(
      "Examples:\n"
      "  moengine generate --model tiny.gguf --prompt 'The experts' --max-tokens 8\n"
      "  moengine generate --model tiny.gguf --prompt-ids 1,2,3 --max-tokens 8 --json\n"
      "  moengine generate --model tiny.gguf --prompt-ids 5,6 --logits-out logits.npy\n"
      "  mpirun -np 2 moengine generate --model tiny.gguf --prompt 'The experts' --ep 2   (rank 0 prints)\n"
      "  moengine generate --model tiny.gguf --prompt 'The experts' --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 3}'\n"
      "--logits-out writes float32 [n_prompt + n_generated - 1, n_vocab]: row i holds the logits\n"
      "after consuming token i (prompt rows from the batched prefill, then one row per decode step).");
  add_model_options(*cmd, args->model);
  cmd->add_option("--prompt,-p", args->prompt, "Prompt text, encoded with the model's own tokenizer (BOS as the file asks)");
  cmd->add_option("--prompt-ids", args->prompt_ids, "Prompt as comma-separated token ids, e.g. 1,2,3");
  cmd->add_option("--max-tokens,-n", args->max_tokens, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "Sampling temperature; 0 = greedy")->capture_default_str();
  cmd->add_option("--seed", args->seed, "Sampling seed")->capture_default_str();
  cmd->add_option("--threads,-t", args->threads, "Compute threads (default: one per core)");
  cmd->add_flag("--json", args->json, "Print {\"prompt_ids\", \"output_ids\", \"text\"} as JSON");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "Keep generating after the end-of-sequence token");
  cmd->add_option("--logits-out", args->logits_out, "Write all logits to this .npy file");
  add_kv_dtype_option(*cmd, args->kv_dtype);
  add_speculative_option(*cmd, args->speculative);
  add_expert_parallel_options(*cmd, args->ep);
  cmd->callback([args] { run(*args); });
}

}  // namespace moe::cli
