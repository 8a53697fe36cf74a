#include "cli/bench_speculative.h"

#include <chrono>
#include <random>

#include "core/error.h"
#include "engine/engine_core.h"

namespace moe::cli {
namespace {

// Proposes the known continuation, each token replaced by a wrong one with probability
// 1 - acceptance; a token's fate is drawn once, so a re-proposed position keeps it.
// The drafter it wraps still runs (an MTP layer's cost is paid) but is not listened to.
class KnownAcceptanceDrafter : public DraftSource {
 public:
  KnownAcceptanceDrafter(std::unique_ptr<DraftSource> inner, std::vector<int32_t> prompt, std::vector<int32_t> truth, double acceptance,
                         int64_t n_vocab)
      : inner_(std::move(inner)), n_prompt_(prompt.size()), truth_(std::move(truth)), n_vocab_(n_vocab) {
    std::mt19937_64 rng(20261207);
    std::bernoulli_distribution right(acceptance);
    for (size_t i = 0; i < truth_.size(); ++i) right_.push_back(right(rng));
  }
  std::vector<int32_t> propose(int64_t id, const std::vector<int32_t>& tokens, int32_t max_k) override {
    if (inner_) (void)inner_->propose(id, tokens, max_k);
    std::vector<int32_t> d;
    for (size_t i = tokens.size() - n_prompt_; i < truth_.size() && int32_t(d.size()) < max_k; ++i) {
      d.push_back(right_[i] ? truth_[i] : int32_t((truth_[i] + 1) % n_vocab_));
    }
    return d;
  }

 private:
  std::unique_ptr<DraftSource> inner_;
  size_t n_prompt_;
  std::vector<int32_t> truth_;
  std::vector<bool> right_;
  int64_t n_vocab_;
};

struct Decoded {
  SpecDecodeRun run;
  std::vector<int32_t> tokens;
};

// known: the continuation to draft from, and the acceptance (none: the config's drafter).
Decoded decode(Model& model, const Tokenizer& tok, KvDtype kv_dtype, const SpeculativeConfig& spec,
               const std::optional<std::pair<std::vector<int32_t>, double>>& known, const std::vector<int32_t>& prompt, int tg,
               ThreadPool& pool) {
  EngineCore core(model, tok, one_request_config(int64_t(prompt.size()), tg + 1, kv_dtype, spec), pool);
  if (known) {
    core.wrap_drafter([&](std::unique_ptr<DraftSource> inner) {
      return std::make_unique<KnownAcceptanceDrafter>(std::move(inner), prompt, known->first, known->second, model.config().n_vocab);
    });
  }
  GenerateParams p;
  p.sampling.temperature = 0.0f;
  p.max_tokens = tg + 1;
  p.ignore_eos = true;
  Decoded d;
  std::optional<std::chrono::steady_clock::time_point> first;
  core.add(0, prompt, p, [&](RequestOutput&& out) {
    if (!first && !out.tokens.empty()) first = std::chrono::steady_clock::now();
    else if (!out.tokens.empty()) ++d.run.steps;
    for (const TokenOutput& t : out.tokens) d.tokens.push_back(t.token);
    if (out.finished) {
      if (out.finish == FinishKind::kError) fail("bench model: {}", out.error);
      d.run.drafted = out.n_draft_tokens;
      d.run.accepted = out.n_accepted_tokens;
    }
  });
  while (core.has_work()) {
    const bool decoding = first.has_value();
    core.step();
    if (decoding) d.run.weight_bytes += double(model.last_step_weight_bytes());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - *first).count();
  d.run.tokens = int64_t(d.tokens.size()) - 1;
  d.run.tokens_per_s = double(d.run.tokens) / s;
  return d;
}

}  // namespace

SpecDecodeBench bench_speculative_decode(Model& model, const Tokenizer& tok, KvDtype kv_dtype, const SpeculativeConfig& spec,
                                         std::optional<double> draft_acceptance, const std::vector<int32_t>& prompt, int tg,
                                         ThreadPool& pool) {
  const Decoded plain = decode(model, tok, kv_dtype, SpeculativeConfig{}, std::nullopt, prompt, tg, pool);
  std::optional<std::pair<std::vector<int32_t>, double>> known;
  if (draft_acceptance) known.emplace(plain.tokens, *draft_acceptance);
  const Decoded speculative = decode(model, tok, kv_dtype, spec, known, prompt, tg, pool);
  if (speculative.tokens != plain.tokens) {
    fail("bench model: speculative decoding changed the greedy output (a bug: please report it with the command)");
  }
  return {plain.run, speculative.run};
}

}  // namespace moe::cli
