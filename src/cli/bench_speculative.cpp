#include "cli/bench_speculative.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <random>

#include "core/error.h"
#include "engine/engine_core.h"

namespace moe::cli {
namespace {

// Proposes each request's known continuation, each token replaced by a wrong one with
// probability 1 - acceptance; a token's fate is drawn once, so a re-proposed position keeps
// it. The drafter it wraps still runs (an MTP layer's cost is paid) but is not listened to.
class KnownAcceptanceDrafter : public DraftSource {
 public:
  KnownAcceptanceDrafter(std::unique_ptr<DraftSource> inner, const std::vector<std::vector<int32_t>>& prompts,
                         std::vector<std::vector<int32_t>> truths, double acceptance, int64_t n_vocab)
      : inner_(std::move(inner)), n_vocab_(n_vocab) {
    std::mt19937_64 rng(20261207);
    std::bernoulli_distribution right(acceptance);
    for (size_t r = 0; r < prompts.size(); ++r) {
      Known k{prompts[r].size(), std::move(truths[r]), {}};
      for (size_t i = 0; i < k.truth.size(); ++i) k.right.push_back(right(rng));
      known_.push_back(std::move(k));
    }
  }
  std::vector<int32_t> propose(int64_t id, const std::vector<int32_t>& tokens, int32_t max_k) override {
    if (inner_) (void)inner_->propose(id, tokens, max_k);
    const Known& k = known_.at(size_t(id));
    std::vector<int32_t> d;
    for (size_t i = tokens.size() - k.n_prompt; i < k.truth.size() && int32_t(d.size()) < max_k; ++i) {
      d.push_back(k.right[i] ? k.truth[i] : int32_t((k.truth[i] + 1) % n_vocab_));
    }
    return d;
  }

 private:
  struct Known {
    size_t n_prompt;
    std::vector<int32_t> truth;
    std::vector<bool> right;
  };
  std::unique_ptr<DraftSource> inner_;
  std::vector<Known> known_;  // by request id
  int64_t n_vocab_;
};

struct Decoded {
  SpecDecodeRun run;
  std::vector<std::vector<int32_t>> tokens;  // per request
};

// The requests decoded together, n_tokens each; known: their continuations to draft from,
// and the acceptance (none: the config's drafter). The prompts are prefilled in one step.
// The decode steps after it are timed until the first request has tg tokens after its
// first, and counted per request (tokens_per_step is a request's): with drafts requests
// advance unevenly, and the steps after the first one ends would run a thinner batch than
// a server that admits the next request meanwhile. The rest is decoded untimed, so the
// outputs can be compared whole.
Decoded decode(Model& model, const Tokenizer& tok, KvDtype kv_dtype, const SpeculativeConfig& spec,
               const std::optional<std::pair<std::vector<std::vector<int32_t>>, double>>& known,
               const std::vector<std::vector<int32_t>>& prompts, int tg, int64_t n_tokens, ThreadPool& pool) {
  const int64_t n = int64_t(prompts.size());
  EngineConfig config = one_request_config(int64_t(prompts[0].size()), n_tokens, kv_dtype, spec);
  config.n_blocks *= int32_t(n);
  config.scheduler.max_num_seqs = int32_t(n);
  config.scheduler.max_num_batched_tokens *= n;
  EngineCore core(model, tok, config, pool);
  if (known) {
    core.wrap_drafter([&](std::unique_ptr<DraftSource> inner) {
      return std::make_unique<KnownAcceptanceDrafter>(std::move(inner), prompts, known->first, known->second, model.config().n_vocab);
    });
  }
  GenerateParams p;
  p.sampling.temperature = 0.0f;
  p.max_tokens = n_tokens;
  p.ignore_eos = true;
  Decoded d;
  d.tokens.resize(prompts.size());
  int64_t started = 0;
  bool timing = false;
  for (int64_t r = 0; r < n; ++r) {
    core.add(r, prompts[size_t(r)], p, [&, r](RequestOutput&& out) {
      if (!out.tokens.empty()) {
        if (d.tokens[size_t(r)].empty()) ++started;
        else if (timing) ++d.run.steps;
      }
      for (const TokenOutput& t : out.tokens) d.tokens[size_t(r)].push_back(t.token);
      if (out.finished) {
        if (out.finish == FinishKind::kError) fail("bench model: {}", out.error);
        d.run.drafted += out.n_draft_tokens;
        d.run.accepted += out.n_accepted_tokens;
      }
    });
  }
  const auto decoded = [&] {
    int64_t total = 0, most = 0;
    for (const auto& t : d.tokens) total += int64_t(t.size()), most = std::max(most, int64_t(t.size()));
    return std::pair{total, most};
  };
  while (started < n && core.has_work()) core.step();
  const int64_t before = decoded().first;
  timing = true;
  const auto t0 = std::chrono::steady_clock::now();
  while (core.has_work() && decoded().second < tg + 1) {
    core.step();
    d.run.weight_bytes += double(model.last_step_weight_bytes());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  timing = false;
  d.run.tokens = decoded().first - before;
  d.run.tokens_per_s = double(d.run.tokens) / s;
  while (core.has_work()) core.step();
  return d;
}

}  // namespace

std::vector<std::vector<int32_t>> echoed_prompts(Model& model, const Tokenizer& tok, KvDtype kv_dtype,
                                                 const std::vector<std::vector<int32_t>>& prompts, int n, ThreadPool& pool) {
  const Decoded continued = decode(model, tok, kv_dtype, SpeculativeConfig{}, std::nullopt, prompts, n - 1, n, pool);
  std::vector<std::vector<int32_t>> out = prompts;
  for (size_t r = 0; r < out.size(); ++r) out[r].insert(out[r].end(), continued.tokens[r].begin(), continued.tokens[r].end());
  return out;
}

SpecDecodeBench bench_speculative_decode(Model& model, const Tokenizer& tok, KvDtype kv_dtype, const SpeculativeConfig& spec,
                                         std::optional<double> draft_acceptance, const std::vector<std::vector<int32_t>>& prompts,
                                         int tg, int reps, ThreadPool& pool, const std::function<void(double)>& progress) {
  if (prompts.empty()) fail("bench model: no prompt to decode");
  // Up to k tokens past tg, so that no request ends inside the timed steps.
  const int64_t n_tokens = tg + 1 + spec.num_speculative_tokens;
  std::optional<std::pair<std::vector<std::vector<int32_t>>, double>> known;
  const int n_pairs = std::max(reps, 1);
  std::vector<SpecDecodeBench> pairs;
  for (int r = 0; r < n_pairs; ++r) {
    const Decoded plain = decode(model, tok, kv_dtype, SpeculativeConfig{}, std::nullopt, prompts, tg, n_tokens, pool);
    if (draft_acceptance && !known) known.emplace(plain.tokens, *draft_acceptance);
    const Decoded speculative = decode(model, tok, kv_dtype, spec, known, prompts, tg, n_tokens, pool);
    if (speculative.tokens != plain.tokens) {
      fail("bench model: speculative decoding changed the greedy output (a bug: please report it with the command)");
    }
    pairs.push_back({plain.run, speculative.run, speculative.run.tokens_per_s / plain.run.tokens_per_s, 0, 0});
    if (progress) progress(double(r + 1) / double(n_pairs));
  }
  std::sort(pairs.begin(), pairs.end(), [](const auto& x, const auto& y) { return x.speedup < y.speedup; });
  SpecDecodeBench median = pairs[pairs.size() / 2];
  median.speedup_min = pairs.front().speedup;
  median.speedup_max = pairs.back().speedup;
  return median;
}

}  // namespace moe::cli
