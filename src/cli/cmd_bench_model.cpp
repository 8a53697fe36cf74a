// moengine bench model: prefill and decode speed of a model file, like llama-bench, with
// the machine's memory bandwidth measured beside each decode run (reading the weights
// decode steps read, and a buffer of its own) and the fraction of the decode roofline
// reached.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <memory>
#include <random>

#include "cli/commands.h"
#include "cli/bench_speculative.h"
#include "cli/kv_dtype_arg.h"
#include "cli/speculative_arg.h"
#include "cli/model_loading.h"
#include "cli/progress.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "tokenizer/gguf_vocab.h"
#include "engine/single_sequence.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/membw.h"

namespace moe::cli {
namespace {

struct BenchModelArgs {
  ModelArgs model;
  int pp = 512;
  int tg = 128;
  int reps = 3;
  int threads = 0;
  std::vector<int> batch;  // decode batch sizes to measure besides tg
  int batch_context = 128;
  std::vector<int> context;  // context depths to decode at, besides tg from an empty one
  KvDtype kv_dtype = kKvDtypeAuto;
  SpeculativeConfig speculative;
  std::optional<double> draft_acceptance;
  int speculative_streams = 1;  // requests decoded together by the speculative run
  int speculative_echo = 0;     // greedy continuation tokens appended to each of its prompts
  bool json = false;
};

struct Stats {
  double mean = 0, stddev = 0;
};

Stats stats(const std::vector<double>& v) {
  Stats s;
  for (double x : v) s.mean += x;
  s.mean /= double(v.size());
  for (double x : v) s.stddev += (x - s.mean) * (x - s.mean);
  s.stddev = v.size() > 1 ? std::sqrt(s.stddev / double(v.size() - 1)) : 0.0;
  return s;
}

// Bandwidth measured beside each decode run by one probe, and the fraction of the roofline
// each run reached against it.
struct Roofline {
  std::unique_ptr<ReadBandwidthProbe> probe;
  std::vector<double> bandwidths, fractions;
  double before = 0;

  void measure_before() { before = probe->measure(); }
  void measure_after(double tokens_per_s, double active_gb) {
    bandwidths.push_back((before + probe->measure()) / 2);
    fractions.push_back(tokens_per_s * active_gb / bandwidths.back());
  }
  double min() const { return *std::min_element(bandwidths.begin(), bandwidths.end()); }
  double max() const { return *std::max_element(bandwidths.begin(), bandwidths.end()); }
};

// A token's weights read again and again would come partly from the caches if smaller.
constexpr uint64_t kMinStepProbeBytes = uint64_t(256) << 20;

// The weight matrices of as many decoded tokens (with experts drawn at random) as make
// 1 GiB, in the order decode steps read them.
std::vector<ByteRange> decode_weight_ranges(const Model& model, std::mt19937& rng) {
  std::vector<ByteRange> ranges;
  size_t total = 0;
  while (total < (size_t(1) << 30)) {
    size_t token = 0;
    for (const QMatrix& w : model.token_matrices(rng)) {
      ranges.push_back({static_cast<const uint8_t*>(w.data), size_t(w.rows) * w.row_stride});
      token += ranges.back().bytes;
    }
    if (token == 0) break;
    total += token;
  }
  return ranges;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Decode tokens/s of `batch` sequences stepping together, each after its own `context`
// random prompt tokens: what a serving engine's decode steps cost at that batch size.
double batched_decode_rate(Model& model, KvDtype kv_dtype, int batch, int context, int steps, ThreadPool& pool,
                           std::mt19937& rng) {
  const int64_t block = 16, blocks_per_seq = (context + steps + block) / block;
  KvStore kv = model.make_kv_store(block, blocks_per_seq * batch, kv_dtype);
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(batch));
  for (int b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < blocks_per_seq; ++i) tables[size_t(b)].push_back(int32_t(b * blocks_per_seq + i));
  }
  std::uniform_int_distribution<int32_t> token(0, int32_t(model.config().n_vocab - 1));
  std::vector<float> logits;
  Step step;
  step.seqs.resize(1);
  for (int b = 0; b < batch; ++b) {
    step.tokens.resize(size_t(context));
    for (auto& t : step.tokens) t = token(rng);
    step.seqs[0] = {&tables[size_t(b)], 0, context, LogitRows::kLast};
    logits.resize(size_t(step.n_logit_rows() * model.config().n_vocab));
    model.forward(step, kv, logits.data(), pool);
  }
  step.seqs.resize(size_t(batch));
  step.tokens.resize(size_t(batch));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    for (int b = 0; b < batch; ++b) {
      step.tokens[size_t(b)] = token(rng);
      step.seqs[size_t(b)] = {&tables[size_t(b)], context + i, 1, LogitRows::kLast};
    }
    logits.resize(size_t(step.n_logit_rows() * model.config().n_vocab));
    model.forward(step, kv, logits.data(), pool);
  }
  return double(batch) * steps / seconds_since(t0);
}

// Decode tokens/s of one sequence after `depth` positions of context, as llama-bench -d
// measures. The first positions (up to 512) are a prefill of random tokens; deeper ones
// repeat those rows, layer by layer, so that a 32k context costs no 32k prefill: decode
// reads every row whatever its values, and its speed does not depend on them.
double decode_rate_at_depth(Model& model, KvDtype kv_dtype, int depth, int steps, ThreadPool& pool, std::mt19937& rng) {
  const int64_t block = 16, n_blocks = (depth + steps + block) / block;
  KvStore kv = model.make_kv_store(block, n_blocks, kv_dtype);
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  for (int64_t i = 0; i < n_blocks; ++i) table[size_t(i)] = int32_t(i);
  std::uniform_int_distribution<int32_t> token(0, int32_t(model.config().n_vocab - 1));
  const int filled = std::min(depth, 512);
  Step step;
  step.tokens.resize(size_t(filled));
  for (auto& t : step.tokens) t = token(rng);
  step.seqs = {{&table, 0, filled, LogitRows::kLast}};
  std::vector<float> logits(size_t(model.config().n_vocab));
  model.forward(step, kv, logits.data(), pool);
  for (int64_t layer = 0; layer < kv.n_layers(); ++layer)
    for (int64_t p = filled; p < depth; ++p)
      std::memcpy(kv.position_row(layer, table, p), kv.position_row(layer, table, p % filled), size_t(kv.row_bytes()));
  step.tokens.resize(1);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    step.tokens[0] = token(rng);
    step.seqs[0] = {&table, depth + i, 1, LogitRows::kLast};
    model.forward(step, kv, logits.data(), pool);
  }
  return steps / seconds_since(t0);
}

void run(const BenchModelArgs& a) {
  if (a.pp < 1 || a.tg < 1 || a.reps < 1) fail("--pp, --tg and --reps must be at least 1");
  for (int b : a.batch) {
    if (b < 1) fail("--batch sizes must be at least 1, got {}", b);
  }
  if (a.batch_context < 1) fail("--batch-context must be at least 1, got {}", a.batch_context);
  for (int d : a.context) {
    if (d < 1) fail("--context depths must be at least 1, got {}", d);
  }
  if (a.draft_acceptance && !a.speculative.enabled()) fail("--draft-acceptance needs --speculative-config (for num_speculative_tokens)");
  if (a.speculative_streams < 1) fail("--speculative-streams must be at least 1, got {}", a.speculative_streams);
  if (a.speculative_echo < 0) fail("--speculative-prompt-echo must be at least 0, got {}", a.speculative_echo);
  if (a.speculative_echo > 0 && !a.speculative.enabled()) fail("--speculative-prompt-echo needs --speculative-config");
  auto model = load_model_with_progress(a.model);
  const ModelConfig& c = model->config();
  ThreadPool pool(a.threads);
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> token(0, int32_t(c.n_vocab - 1));
  std::vector<int32_t> prompt(size_t(a.pp));
  for (auto& t : prompt) t = token(rng);

  SingleSequence seq(*model, std::max(a.pp, a.tg) + 1, a.kv_dtype);
  // Warm-up: first touches of weights and buffers (the activations of a whole --pp prompt
  // included, which a shorter warm-up leaves for the first timed run) are not measured.
  seq.prefill(prompt, false, pool);
  seq.reset();

  // Each decode run is compared with the read bandwidth measured just before and after
  // it (what the machine offered during that run): reading the weights decode steps read,
  // where they lie, and a buffer of its own.
  Roofline scratch, weights;
  scratch.probe = std::make_unique<ReadBandwidthProbe>(pool, size_t(1) << 30);
  if (model->active_bytes_per_token() >= kMinStepProbeBytes) {
    std::mt19937 experts(99);
    weights.probe = std::make_unique<ReadBandwidthProbe>(pool, decode_weight_ranges(*model, experts));
  }
  const double active_gb = double(model->active_bytes_per_token()) / 1e9;
  std::vector<double> pp_rates, tg_rates;
  ProgressBar bar(fmt::format("bench pp{} tg{} x{}", a.pp, a.tg, a.reps));
  for (int r = 0; r < a.reps; ++r) {
    seq.reset();
    auto t0 = std::chrono::steady_clock::now();
    seq.prefill(prompt, false, pool);
    pp_rates.push_back(a.pp / seconds_since(t0));
    bar.update((r + 0.5) / a.reps);
    seq.reset();
    int32_t next = prompt[0];
    scratch.measure_before();
    if (weights.probe) weights.measure_before();
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < a.tg; ++i) {
      const std::vector<float>& l = seq.decode(next, pool);
      next = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
    }
    tg_rates.push_back(a.tg / seconds_since(t0));
    if (weights.probe) weights.measure_after(tg_rates.back(), active_gb);
    scratch.measure_after(tg_rates.back(), active_gb);
    bar.update((r + 1.0) / a.reps);
  }
  bar.done();
  std::vector<Stats> batched;
  if (!a.batch.empty()) {
    ProgressBar batch_bar(fmt::format("bench batched decode tg{} x{}", a.tg, a.reps));
    for (size_t i = 0; i < a.batch.size(); ++i) {
      std::vector<double> rates;
      for (int r = 0; r < a.reps; ++r) {
        rates.push_back(batched_decode_rate(*model, a.kv_dtype, a.batch[i], a.batch_context, a.tg, pool, rng));
        batch_bar.update((double(i) + (r + 1.0) / a.reps) / double(a.batch.size()));
      }
      batched.push_back(stats(rates));
    }
    batch_bar.done();
  }
  std::vector<Stats> at_depth;
  if (!a.context.empty()) {
    ProgressBar depth_bar(fmt::format("bench tg{} at depth x{}", a.tg, a.reps));
    for (size_t i = 0; i < a.context.size(); ++i) {
      if (a.context[i] + a.tg > c.n_ctx_train) {
        fail("--context {}: {} + {} decoded tokens is more than the model's context length ({})", a.context[i], a.context[i], a.tg,
             c.n_ctx_train);
      }
      std::vector<double> rates;
      for (int r = 0; r < a.reps; ++r) {
        rates.push_back(decode_rate_at_depth(*model, a.kv_dtype, a.context[i], a.tg, pool, rng));
        depth_bar.update((double(i) + (r + 1.0) / a.reps) / double(a.context.size()));
      }
      at_depth.push_back(stats(rates));
    }
    depth_bar.done();
  }
  std::optional<SpecDecodeBench> spec;
  if (a.speculative.enabled()) {
    if (!model->file().has("tokenizer.ggml.tokens")) fail("{}: --speculative-config runs the serving engine, which needs the file's tokenizer", a.model.path);
    const Tokenizer tok(tokenizer_spec_from_gguf(model->file()));
    ProgressBar spec_bar(fmt::format("bench speculative decode tg{} x{} streams", a.tg, a.speculative_streams));
    std::vector<std::vector<int32_t>> prompts{prompt};
    while (int(prompts.size()) < a.speculative_streams) {
      std::vector<int32_t> p(prompt.size());
      for (int32_t& t : p) t = token(rng);
      prompts.push_back(std::move(p));
    }
    if (a.speculative_echo > 0) prompts = echoed_prompts(*model, tok, a.kv_dtype, prompts, a.speculative_echo, pool);
    spec = bench_speculative_decode(*model, tok, a.kv_dtype, a.speculative, a.draft_acceptance, prompts, a.tg, a.reps, pool,
                                    [&](double f) { spec_bar.update(f); });
    spec_bar.done();
  }
  auto spec_json = [&](const SpecDecodeRun& r) {
    return nlohmann::ordered_json{{"tokens_per_s", r.tokens_per_s},
                                  {"tokens", r.tokens},
                                  {"steps", r.steps},
                                  {"tokens_per_step", r.tokens_per_step()},
                                  {"drafted_tokens", r.drafted},
                                  {"accepted_tokens", r.accepted},
                                  {"acceptance", r.drafted > 0 ? double(r.accepted) / double(r.drafted) : 0.0},
                                  {"weight_bytes_per_token", r.weight_bytes_per_token()}};
  };
  // What a decoded token reads at depth d: the weights, and every layer's d rows of KV.
  const double kv_bytes_per_position = double(c.n_layer) * double(c.kv_row_format(a.kv_dtype).bytes());

  const Stats pp = stats(pp_rates), tg = stats(tg_rates), bw = stats(scratch.bandwidths),
              reached = stats(scratch.fractions);
  const double gflops = 2.0 * double(model->active_params_per_token()) * pp.mean / 1e9;

  if (a.json) {
    nlohmann::ordered_json j = {{"model", a.model.path},
                        {"threads", pool.size()},
                        {"cpu", cpu_features().describe()},
                        {"matmul_backend", matmul_backend_name()},
                        {"attention_backend", attention_backend_name()},
                        {"kv_cache_dtype", kv_dtype_name(a.kv_dtype)},
                        {"moved_weight_bytes", model->moved_weight_bytes()},
                        {"regrouped_weight_bytes", model->regrouped_weight_bytes()},
                        {"pp", a.pp},
                        {"tg", a.tg},
                        {"reps", a.reps},
                        {"pp_tokens_per_s", pp.mean},
                        {"pp_stddev", pp.stddev},
                        {"tg_tokens_per_s", tg.mean},
                        {"tg_stddev", tg.stddev},
                        {"prefill_gflops", gflops},
                        {"memory_bandwidth_gbps", bw.mean},
                        {"memory_bandwidth_min_gbps", scratch.min()},
                        {"memory_bandwidth_max_gbps", scratch.max()},
                        {"active_bytes_per_token", model->active_bytes_per_token()},
                        {"decode_roofline_tokens_per_s", bw.mean / active_gb},
                        {"decode_roofline_fraction", reached.mean},
                        {"decode_roofline_fraction_stddev", reached.stddev}};
    if (weights.probe) {
      const Stats wbw = stats(weights.bandwidths), wreached = stats(weights.fractions);
      j["step_weights_bandwidth_gbps"] = wbw.mean;
      j["step_weights_bandwidth_min_gbps"] = weights.min();
      j["step_weights_bandwidth_max_gbps"] = weights.max();
      j["step_weights_roofline_fraction"] = wreached.mean;
      j["step_weights_roofline_fraction_stddev"] = wreached.stddev;
    }
    for (size_t i = 0; i < batched.size(); ++i) {
      j["batched_decode"].push_back({{"batch", a.batch[i]},
                                     {"context", a.batch_context},
                                     {"tokens_per_s", batched[i].mean},
                                     {"stddev", batched[i].stddev},
                                     {"step_ms", 1e3 * a.batch[i] / batched[i].mean}});
    }
    for (size_t i = 0; i < at_depth.size(); ++i) {
      const double gb = active_gb + double(a.context[i]) * kv_bytes_per_position / 1e9;
      j["decode_at_depth"].push_back({{"context", a.context[i]},
                                      {"tokens_per_s", at_depth[i].mean},
                                      {"stddev", at_depth[i].stddev},
                                      {"bytes_per_token", gb * 1e9},
                                      {"roofline_fraction", at_depth[i].mean * gb / bw.mean}});
    }
    if (spec) {
      j["speculative"] = {{"config", nlohmann::json::parse(speculative_config_json(a.speculative))},
                          {"draft_acceptance", a.draft_acceptance ? nlohmann::ordered_json(*a.draft_acceptance) : nullptr},
                          {"streams", a.speculative_streams},
                          {"prompt_tokens", a.pp + a.speculative_echo},
                          {"without_drafts", spec_json(spec->plain)},
                          {"with_drafts", spec_json(spec->speculative)},
                          {"speedup", spec->speedup},
                          {"speedup_range", {spec->speedup_min, spec->speedup_max}},
                          {"pairs", a.reps}};
    }
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("model: %s\n", c.summary().c_str());
  std::printf("cpu: %s; matmul: %s; attention: %s, KV cache %s; huge pages: %.0f MiB; regrouped: %.0f MiB; threads: %d\n",
              cpu_features().describe().c_str(), matmul_backend_name(), attention_backend_name(), kv_dtype_name(a.kv_dtype),
              double(model->moved_weight_bytes()) / 1048576.0, double(model->regrouped_weight_bytes()) / 1048576.0,
              pool.size());
  std::printf("| test   |          t/s |\n|--------|--------------|\n");
  std::printf("| pp%-4d | %7.2f ± %.2f |\n", a.pp, pp.mean, pp.stddev);
  std::printf("| tg%-4d | %7.2f ± %.2f |\n", a.tg, tg.mean, tg.stddev);
  for (size_t i = 0; i < batched.size(); ++i) {
    std::printf("| tg%-4d @ batch %-3d | %7.2f ± %.2f | %.1f ms per step |\n", a.tg, a.batch[i], batched[i].mean,
                batched[i].stddev, 1e3 * a.batch[i] / batched[i].mean);
  }
  for (size_t i = 0; i < at_depth.size(); ++i) {
    const double gb = active_gb + double(a.context[i]) * kv_bytes_per_position / 1e9;
    std::printf("| tg%-4d @ d%-6d | %7.2f ± %.2f | %.3f GB per token (KV %s %.3f) | %.0f%% of the 1 GiB buffer's roofline |\n", a.tg,
                a.context[i], at_depth[i].mean, at_depth[i].stddev, gb, kv_dtype_name(a.kv_dtype),
                double(a.context[i]) * kv_bytes_per_position / 1e9, 100.0 * at_depth[i].mean * gb / bw.mean);
  }
  if (spec) {
    for (const auto& [name, r] : {std::pair{"engine, no drafts", spec->plain}, std::pair{"engine, drafts", spec->speculative}}) {
      std::printf("| tg%-4d %-17s | %7.2f | %.2f tokens per step, %lld of %lld drafts accepted | %.3f GB of weights per token |\n", a.tg, name,
                  r.tokens_per_s, r.tokens_per_step(), (long long)r.accepted, (long long)r.drafted, r.weight_bytes_per_token() / 1e9);
    }
    std::printf("speculative decoding %s%s%s: %.2fx the engine's decode speed without drafts (%.2f-%.2fx over %d pairs of runs)\n",
                speculative_config_json(a.speculative).c_str(),
                a.draft_acceptance ? fmt::format(", drafts right with probability {}", *a.draft_acceptance).c_str() : "",
                a.speculative_streams > 1 ? fmt::format(", {} requests decoded together", a.speculative_streams).c_str() : "",
                spec->speedup, spec->speedup_min, spec->speedup_max, std::max(a.reps, 1));
  }
  std::printf("prefill: %.1f GFLOP/s (2 x %.3fB active parameters per token)\n", gflops,
              double(model->active_params_per_token()) / 1e9);
  std::printf("decode roofline: %.3f GB of weights per token, read at the bandwidth measured beside the tg runs\n",
              active_gb);
  auto print_roofline = [&](const char* memory, const Roofline& r) {
    const Stats b = stats(r.bandwidths), f = stats(r.fractions);
    std::printf("  %s: %.1f GB/s (%.1f-%.1f) = %.1f tok/s; reached %.0f%% ± %.0f%%\n", memory, b.mean, r.min(),
                r.max(), b.mean / active_gb, 100.0 * f.mean, 100.0 * f.stddev);
  };
  if (weights.probe) print_roofline("the weights decode steps read", weights);
  print_roofline("a 1 GiB buffer               ", scratch);
}

}  // namespace

void register_bench_model(CLI::App& bench) {
  auto args = std::make_shared<BenchModelArgs>();
  CLI::App* cmd = bench.add_subcommand("model", "Prefill (pp) and decode (tg) speed of a model, like llama-bench");
  cmd->footer(
      "Example:\n"
      "  moengine bench model --model mid-q8_0.gguf --pp 512 --tg 128 --threads 2\n"
      "pp: tokens/s of one batched prefill of N random tokens; tg: tokens/s decoding N tokens one at a\n"
      "time from an empty context. Also measures the memory read bandwidth just before and after each\n"
      "tg run and reports the fraction of the decode roofline (bandwidth / weight bytes read per token)\n"
      "reached, run by run against the bandwidth measured beside it: reading the weights decode steps\n"
      "read, where they lie (when a token reads 256 MiB or more), and a 1 GiB buffer of its own.\n"
      "--batch 1,4,16,32: also tokens/s of that many sequences decoding together (tg steps each, after\n"
      "--batch-context random prompt tokens), as a serving engine's decode steps run.\n"
      "--context 4096,16384: also tg tokens/s of one sequence decoding after that many positions of\n"
      "context (as llama-bench -d), with the KV bytes each token reads; --kv-cache-dtype sets how the KV is stored.\n"
      "--speculative-config JSON: also tg tokens decoded by the serving engine without and with drafts;\n"
      "--draft-acceptance 0.8 replaces the drafts by the known continuation, 80% of them right (docs/speculative.md):\n"
      "  moengine bench model --model mid-q8_0.gguf --tg 64 --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 3}' --draft-acceptance 0.8");
  add_model_options(*cmd, args->model);
  cmd->add_option("--pp", args->pp, "Prompt tokens per prefill run")->capture_default_str();
  cmd->add_option("--tg", args->tg, "Tokens per decode run")->capture_default_str();
  cmd->add_option("--reps,-r", args->reps, "Repetitions of each run (with --speculative-config: pairs of runs without and with drafts)")->capture_default_str();
  cmd->add_option("--threads,-t", args->threads, "Compute threads (default: one per core)");
  cmd->add_option("--speculative-streams", args->speculative_streams,
                  "Requests the --speculative-config run decodes together (each its own random prompt of --pp tokens)")
      ->capture_default_str();
  cmd->add_option("--speculative-prompt-echo", args->speculative_echo,
                  "Append to each prompt of the --speculative-config run the model's own greedy continuation of N tokens: "
                  "a prompt holding text the output goes on to repeat, the workload n-gram drafting is made for")
      ->type_name("N")
      ->capture_default_str();
  cmd->add_option("--batch", args->batch, "Decode batch sizes to measure, comma-separated (e.g. 1,4,16,32)")->delimiter(',');
  cmd->add_option("--batch-context", args->batch_context, "Prompt tokens per sequence before batched decode")->capture_default_str();
  cmd->add_option("--context", args->context, "Context depths to decode at, comma-separated (e.g. 4096,16384,32768)")->delimiter(',');
  add_kv_dtype_option(*cmd, args->kv_dtype);
  add_speculative_option(*cmd, args->speculative);
  cmd->add_option_function<double>(
         "--draft-acceptance",
         [args](double v) {
           if (!(v >= 0.0 && v <= 1.0)) fail("--draft-acceptance must be in [0, 1], got {}", v);
           args->draft_acceptance = v;
         },
         "For benchmarks only: the drafter proposes the greedy continuation, each token right with this probability "
         "(needs --speculative-config for num_speculative_tokens)")
      ->type_name("A");
  cmd->add_flag("--json", args->json, "Print the results as JSON");
  cmd->callback([args] { run(*args); });
}

}  // namespace moe::cli
