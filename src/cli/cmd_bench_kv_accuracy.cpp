// moengine bench kv-accuracy: what storing the KV cache below f32 costs in accuracy. The
// same long prompt runs with an f32 cache and with each other dtype; per position, the KL
// divergence of the dtype's next-token distribution from f32's and whether their most
// likely tokens agree, over the prompt and over f32's greedy continuation (teacher forced),
// then each dtype's own greedy continuation against f32's.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/commands.h"
#include "cli/model_loading.h"
#include "cli/token_ids_arg.h"
#include "cli/progress.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/single_sequence.h"
#include "tokenizer/gguf_vocab.h"

namespace moe::cli {
namespace {

constexpr int64_t kPrefillChunk = 512;

struct KvAccuracyArgs {
  ModelArgs model;
  int prompt_len = 2048;
  int gen = 64;
  std::vector<std::string> dtypes{"f16", "bf16", "fp8_e4m3", "q8_0"};
  std::string prompt_file;
  std::string prompt_ids;
  int threads = 0;
  uint64_t seed = 1;
  bool json = false;
};

// Log-probabilities of one row of logits, in double.
std::vector<double> log_softmax(const float* logits, int64_t n) {
  const double max = *std::max_element(logits, logits + n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - max);
  const double log_sum = max + std::log(sum);
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = double(logits[i]) - log_sum;
  return out;
}

int32_t argmax(const float* logits, int64_t n) { return int32_t(std::max_element(logits, logits + n) - logits); }

// The rows of logits after each of `tokens` but the last generated one: the prompt in
// chunks, then one decode step per generated token (as serving runs them).
std::vector<float> forced_logits(SingleSequence& seq, const std::vector<int32_t>& prompt, const std::vector<int32_t>& generated,
                                 int64_t n_vocab, ThreadPool& pool) {
  seq.reset();
  std::vector<float> rows;
  for (size_t at = 0; at < prompt.size(); at += kPrefillChunk) {
    const std::vector<int32_t> chunk(prompt.begin() + long(at), prompt.begin() + long(std::min(prompt.size(), at + kPrefillChunk)));
    const std::vector<float>& l = seq.prefill(chunk, true, pool);
    rows.insert(rows.end(), l.begin(), l.end());
  }
  for (size_t i = 0; i + 1 < generated.size(); ++i) {
    const std::vector<float>& l = seq.decode(generated[i], pool);
    rows.insert(rows.end(), l.begin(), l.end());
  }
  if (int64_t(rows.size()) != int64_t(prompt.size() + generated.size() - 1) * n_vocab) fail("kv-accuracy: internal row count");
  return rows;
}

// Greedy continuation of `prompt`, n tokens.
std::vector<int32_t> greedy(SingleSequence& seq, const std::vector<int32_t>& prompt, int n, int64_t n_vocab, ThreadPool& pool) {
  seq.reset();
  const float* last = nullptr;
  for (size_t at = 0; at < prompt.size(); at += kPrefillChunk) {
    const std::vector<int32_t> chunk(prompt.begin() + long(at), prompt.begin() + long(std::min(prompt.size(), at + kPrefillChunk)));
    last = seq.prefill(chunk, false, pool).data();
  }
  std::vector<int32_t> out{argmax(last, n_vocab)};
  while (int(out.size()) < n) out.push_back(argmax(seq.decode(out.back(), pool).data(), n_vocab));
  return out;
}

struct DtypeResult {
  std::string dtype;
  double kl_mean = 0, kl_p99 = 0, kl_max = 0;
  double top1 = 0;       // fraction of positions whose most likely token is f32's
  int greedy_equal = 0;  // generated tokens equal to f32's, from the start
  double margin_at_divergence = -1;  // f32's top-1 minus top-2 logit where they part (-1: never)
};

void run(const KvAccuracyArgs& a) {
  if (a.prompt_len < 1 || a.gen < 1) fail("--prompt-len and --gen must be at least 1");
  std::vector<KvDtype> dtypes;
  for (const std::string& d : a.dtypes) {
    const std::optional<KvDtype> k = parse_kv_dtype(d);
    if (!k || *k == KvDtype::f32) fail("--dtypes: '{}' is not one of f16, bf16, fp8_e4m3, q8_0", d);
    dtypes.push_back(*k);
  }
  auto model = load_model_with_progress(a.model);
  const ModelConfig& c = model->config();
  if (a.prompt_len + a.gen > c.n_ctx_train) {
    fail("--prompt-len {} + --gen {} is more than the model's context length ({})", a.prompt_len, a.gen, c.n_ctx_train);
  }
  std::vector<int32_t> prompt;
  if (!a.prompt_ids.empty() && !a.prompt_file.empty()) fail("give at most one of --prompt-file and --prompt-ids");
  if (!a.prompt_ids.empty()) {
    prompt = parse_token_ids(a.prompt_ids, "--prompt-ids", c.n_vocab);
    if (int(prompt.size()) != a.prompt_len) fail("--prompt-ids: {} ids, --prompt-len is {}", prompt.size(), a.prompt_len);
  } else if (!a.prompt_file.empty()) {
    std::ifstream in(a.prompt_file, std::ios::binary);
    if (!in) fail("--prompt-file: cannot open '{}'", a.prompt_file);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!model->file().has("tokenizer.ggml.tokens")) fail("{}: the file has no tokenizer for --prompt-file", a.model.path);
    prompt = Tokenizer(tokenizer_spec_from_gguf(model->file())).encode(text, true);
    if (int(prompt.size()) < a.prompt_len) {
      fail("--prompt-file: '{}' encodes to {} tokens, fewer than --prompt-len {}", a.prompt_file, prompt.size(), a.prompt_len);
    }
    prompt.resize(size_t(a.prompt_len));
  } else {
    std::mt19937 rng(uint32_t(a.seed));
    std::uniform_int_distribution<int32_t> token(0, int32_t(c.n_vocab - 1));
    for (int i = 0; i < a.prompt_len; ++i) prompt.push_back(token(rng));
  }
  ThreadPool pool(a.threads);
  const int64_t n_vocab = c.n_vocab, max_len = a.prompt_len + a.gen + 1;

  ProgressBar bar(fmt::format("kv-accuracy: {} tokens + {} generated, f32 and {} dtypes", a.prompt_len, a.gen, dtypes.size()));
  const double passes = 2.0 * double(dtypes.size() + 1);
  SingleSequence ref_seq(*model, max_len, KvDtype::f32);
  const std::vector<int32_t> ref_gen = greedy(ref_seq, prompt, a.gen, n_vocab, pool);
  bar.update(1 / passes);
  const std::vector<float> ref = forced_logits(ref_seq, prompt, ref_gen, n_vocab, pool);
  bar.update(2 / passes);
  const int64_t n_rows = int64_t(ref.size()) / n_vocab;

  std::vector<DtypeResult> results;
  for (size_t di = 0; di < dtypes.size(); ++di) {
    SingleSequence seq(*model, max_len, dtypes[di]);
    const std::vector<float> got = forced_logits(seq, prompt, ref_gen, n_vocab, pool);
    bar.update((3 + 2 * double(di)) / passes);
    DtypeResult r{kv_dtype_name(dtypes[di])};
    std::vector<double> kl(static_cast<size_t>(n_rows));
    int agree = 0;
    for (int64_t row = 0; row < n_rows; ++row) {
      const float* p = ref.data() + row * n_vocab;
      const float* q = got.data() + row * n_vocab;
      const std::vector<double> lp = log_softmax(p, n_vocab), lq = log_softmax(q, n_vocab);
      double d = 0.0;
      for (int64_t i = 0; i < n_vocab; ++i) d += std::exp(lp[size_t(i)]) * (lp[size_t(i)] - lq[size_t(i)]);
      kl[size_t(row)] = std::max(0.0, d);
      agree += argmax(p, n_vocab) == argmax(q, n_vocab);
    }
    for (double x : kl) r.kl_mean += x / double(n_rows);
    std::sort(kl.begin(), kl.end());
    r.kl_p99 = kl[size_t(std::min<int64_t>(n_rows - 1, int64_t(0.99 * double(n_rows))))];
    r.kl_max = kl.back();
    r.top1 = double(agree) / double(n_rows);
    const std::vector<int32_t> own = greedy(seq, prompt, a.gen, n_vocab, pool);
    bar.update((4 + 2 * double(di)) / passes);
    while (r.greedy_equal < a.gen && own[size_t(r.greedy_equal)] == ref_gen[size_t(r.greedy_equal)]) ++r.greedy_equal;
    if (r.greedy_equal < a.gen) {
      // Where they part, both saw the same tokens: f32's margin there tells a near tie.
      std::vector<float> row(ref.begin() + (a.prompt_len - 1 + r.greedy_equal) * n_vocab,
                             ref.begin() + (a.prompt_len + r.greedy_equal) * n_vocab);
      std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<float>());
      r.margin_at_divergence = double(row[0]) - double(row[1]);
    }
    results.push_back(r);
  }
  bar.done();

  if (a.json) {
    nlohmann::ordered_json j = {{"model", a.model.path}, {"prompt_len", a.prompt_len}, {"gen", a.gen}, {"positions", n_rows}};
    for (const DtypeResult& r : results) {
      j["dtypes"].push_back({{"dtype", r.dtype},
                             {"kl_mean", r.kl_mean},
                             {"kl_p99", r.kl_p99},
                             {"kl_max", r.kl_max},
                             {"top1_agreement", r.top1},
                             {"greedy_tokens_equal", r.greedy_equal},
                             {"margin_at_divergence", r.margin_at_divergence < 0 ? nlohmann::json() : nlohmann::json(r.margin_at_divergence)}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("model: %s\n", c.summary().c_str());
  std::printf("%lld positions (%d prompt tokens, then f32's greedy %d, teacher forced); KL(f32 || dtype) of the next-token distribution\n",
              (long long)n_rows, a.prompt_len, a.gen);
  std::printf("| KV dtype | mean KL | p99 KL | max KL | top-1 = f32 | greedy tokens = f32 | f32 margin where they part |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const DtypeResult& r : results) {
    const std::string margin = r.margin_at_divergence < 0 ? "never" : fmt::format("{:.4f}", r.margin_at_divergence);
    std::printf("| %s | %.3g | %.3g | %.3g | %.2f%% | %d / %d | %s |\n", r.dtype.c_str(), r.kl_mean, r.kl_p99, r.kl_max, 100.0 * r.top1,
                r.greedy_equal, a.gen, margin.c_str());
  }
}

}  // namespace

void register_bench_kv_accuracy(CLI::App& bench) {
  auto args = std::make_shared<KvAccuracyArgs>();
  CLI::App* cmd = bench.add_subcommand("kv-accuracy", "What a KV cache below f32 costs in accuracy: KL divergence to f32 KV");
  cmd->footer(
      "Example:\n"
      "  moengine bench kv-accuracy --model models/mid-q8_0.gguf --prompt-len 2048 --gen 64 --threads 2\n"
      "Runs the prompt (random tokens, --prompt-ids, or the start of --prompt-file) with an f32 KV cache and each\n"
      "dtype: per position, KL(f32 || dtype) of the next-token distribution and whether the most likely\n"
      "tokens agree, over the prompt and f32's greedy continuation (teacher forced), then how many of each\n"
      "dtype's own greedy tokens equal f32's, and f32's top-1 minus top-2 logit where they part.");
  add_model_options(*cmd, args->model);
  cmd->add_option("--prompt-len", args->prompt_len, "Prompt tokens")->capture_default_str();
  cmd->add_option("--gen", args->gen, "Tokens generated after the prompt")->capture_default_str();
  cmd->add_option("--dtypes", args->dtypes, "KV dtypes to compare with f32, comma-separated")->delimiter(',')->capture_default_str();
  cmd->add_option("--prompt-file", args->prompt_file, "A text file whose first --prompt-len tokens are the prompt");
  cmd->add_option("--prompt-ids", args->prompt_ids, "The prompt as --prompt-len comma-separated token ids");
  cmd->add_option("--seed", args->seed, "Seed of the random prompt")->capture_default_str();
  cmd->add_option("--threads,-t", args->threads, "Compute threads (default: one per core)");
  cmd->add_flag("--json", args->json, "Print the results as JSON");
  cmd->callback([args] { run(*args); });
}

}  // namespace moe::cli
