// Speculative decoding in the engine: the n-gram drafter, the speculative config, drafts in
// the scheduler's plans (budget, max_tokens, rejected positions given back to the pool), and
// end to end on generated deepseek2 and qwen3moe models: greedy output token for token equal
// to decoding without drafts whatever the drafter (n-gram with 1 and 3 tokens, always right,
// always wrong), batched, preempted, with stop tokens and max_tokens landing inside an
// accepted run, with penalties and logit_bias, and logprobs unchanged; randomized drafts
// against a fake model keep every output and the block pool; sampled output keeps the
// target distribution (a chi-square test).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine_core.h"
#include "engine/single_sequence.h"
#include "engine/draft_length.h"
#include "engine/speculative.h"
#include "test_models.h"
#include "test_requests.h"
#include "tokenizer/gguf_vocab.h"

namespace moe {
namespace {

using testing::greedy;
using testing::prompt_of;

TEST(NgramDrafter, ProposesWhatFollowedTheLatestEarlierOccurrenceOfTheLongestSuffix) {
  NgramDrafter d(2, 3);
  // The suffix "7 8 9" occurred at 1; "8 9" alone also at 5, but the longer match wins.
  EXPECT_EQ(d.propose(0, {1, 7, 8, 9, 4, 8, 9, 2, 7, 8, 9}, 3), (std::vector<int32_t>{4, 8, 9}));
  // Only "8 9" matches: its latest occurrence (at 5) is followed by 2.
  EXPECT_EQ(d.propose(0, {8, 9, 4, 6, 5, 8, 9, 2, 3, 8, 9}, 2), (std::vector<int32_t>{2, 3}));
  // The draft stops at the end of the tokens.
  EXPECT_EQ(d.propose(0, {5, 6, 1, 5, 6}, 4), (std::vector<int32_t>{1, 5, 6}));
  // Below min_n nothing is proposed.
  EXPECT_TRUE(d.propose(0, {1, 2, 3, 4, 3}, 3).empty());
  EXPECT_TRUE(d.propose(0, {1}, 3).empty());
  // A run of one token predicts more of it, as far as its latest earlier occurrence goes.
  EXPECT_EQ(d.propose(0, {4, 4, 4, 4}, 2), (std::vector<int32_t>{4}));
}

std::string error_of(const std::string& json) {
  try {
    parse_speculative_config(json);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SpeculativeConfig, ParsesVllmsSpellingAndNamesTheBadField) {
  const SpeculativeConfig c = parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4})");
  EXPECT_EQ(c.method, SpeculativeConfig::Method::kNgram);
  EXPECT_EQ(c.num_speculative_tokens, 3);
  EXPECT_EQ(c.prompt_lookup_max, 4);
  EXPECT_EQ(c.prompt_lookup_min, 2);
  EXPECT_EQ(parse_speculative_config(speculative_config_json(c)).prompt_lookup_max, 4);
  EXPECT_EQ(parse_speculative_config(R"({"method": "deepseek_mtp", "num_speculative_tokens": 1})").method,
            SpeculativeConfig::Method::kMtp);
  EXPECT_EQ(error_of("ngram"), "speculative config: not a JSON object: ngram");
  EXPECT_EQ(error_of(R"({"method": "eagle", "num_speculative_tokens": 1})"),
            "speculative config: method must be \"ngram\" or \"mtp\", got \"eagle\"");
  EXPECT_EQ(error_of(R"({"method": "ngram"})"), "speculative config: num_speculative_tokens is required");
  EXPECT_EQ(error_of(R"({"method": "ngram", "num_speculative_tokens": 0})"),
            "speculative config: num_speculative_tokens must be in [1, 16], got 0");
  EXPECT_EQ(error_of(R"({"method": "ngram", "num_speculative_tokens": "2"})"),
            "speculative config: num_speculative_tokens must be an integer, got \"2\"");
  EXPECT_EQ(error_of(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 5, "prompt_lookup_max": 3})"),
            "speculative config: prompt_lookup_min (5) exceeds prompt_lookup_max (3)");
  EXPECT_NE(error_of(R"({"method": "ngram", "num_speculative_tokens": 2, "draft_model": "x"})").find("unknown field 'draft_model'"),
            std::string::npos);
  EXPECT_TRUE(c.adaptive);
  const SpeculativeConfig fixed = parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 2, "adaptive": false})");
  EXPECT_FALSE(fixed.adaptive);
  EXPECT_FALSE(parse_speculative_config(speculative_config_json(fixed)).adaptive);
  EXPECT_EQ(error_of(R"({"method": "ngram", "num_speculative_tokens": 2, "adaptive": 1})"), "speculative config: adaptive must be true or false");
}

// Proposes the same k tokens for every request.
struct FixedDrafts : DraftSource {
  std::vector<int32_t> draft;
  int calls = 0;
  std::vector<int32_t> propose(int64_t, const std::vector<int32_t>&, int32_t max_k) override {
    ++calls;
    return std::vector<int32_t>(draft.begin(), draft.begin() + std::min<ptrdiff_t>(max_k, ptrdiff_t(draft.size())));
  }
};

TEST(SchedulerDrafts, DraftsFollowTheDecodesWithinBudgetAndRejectedPositionsGoBack) {
  BlockManager bm(16, 4);
  SchedulerConfig cfg;
  cfg.max_num_batched_tokens = 8;
  cfg.max_num_seqs = 4;
  cfg.num_speculative_tokens = 3;
  cfg.adaptive_drafts = false;  // the mechanics, at a fixed length
  Scheduler sch(cfg, bm);
  FixedDrafts drafts;
  drafts.draft = {7, 8, 9};
  sch.set_draft_source(&drafts);
  Request a{.id = 1, .prompt = {1, 2, 3, 4, 5}, .max_tokens = 10};
  Request b{.id = 2, .prompt = {6, 6, 6}, .max_tokens = 3};
  ASSERT_TRUE(sch.add(a));
  ASSERT_TRUE(sch.add(b));
  StepPlan p = sch.schedule();  // both prompts (5 + 3 tokens); no drafts while prefilling
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[0].n_draft, 0);
  EXPECT_EQ(drafts.calls, 0);
  sch.on_step_done(p, std::vector<int32_t>{50, 60});

  p = sch.schedule();
  ASSERT_EQ(p.seqs.size(), 2u);
  // Request 1: its last token and 3 drafts; request 2 (1 of 3 made) may emit 2 more only,
  // so 1 draft; 4 + 2 = 6 tokens of the budget of 8.
  EXPECT_EQ(p.seqs[0].tokens, (std::vector<int32_t>{50, 7, 8, 9}));
  EXPECT_EQ(p.seqs[0].n_draft, 3);
  EXPECT_EQ(p.seqs[0].n_logit_rows(), 4);
  EXPECT_EQ(p.seqs[0].pos0, 5);
  EXPECT_EQ(p.seqs[1].tokens, (std::vector<int32_t>{60, 7}));
  EXPECT_EQ(p.seqs[1].n_draft, 1);
  EXPECT_EQ(p.n_batched_tokens, 6);
  EXPECT_EQ(bm.num_tokens(1), 9);
  EXPECT_EQ(bm.table(1).size(), 3u);
  // Emitted tokens that are not the drafts are refused.
  EXPECT_THROW(sch.on_step_done(p, std::vector<std::vector<int32_t>>{{7, 5, 1}, {7, 2}}), std::invalid_argument);
  EXPECT_THROW(sch.on_step_done(p, std::vector<std::vector<int32_t>>{{7, 8, 9, 1, 2}, {7}}), std::invalid_argument);
  // Request 1 accepted one draft (7) then emitted 30: positions 5 and 6 hold KV, 7 and 8
  // are given back with the block that only they used. Request 2 accepted its draft and
  // reached max_tokens.
  const std::vector<int64_t> done = sch.on_step_done(p, std::vector<std::vector<int32_t>>{{7, 30}, {7, 61}});
  EXPECT_EQ(done, (std::vector<int64_t>{2}));
  EXPECT_EQ(sch.output(1), (std::vector<int32_t>{50, 7, 30}));
  EXPECT_EQ(bm.num_tokens(1), 7);
  EXPECT_EQ(bm.table(1).size(), 2u);
  EXPECT_EQ(bm.validate(), "");

  p = sch.schedule();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].pos0, 7);
  EXPECT_EQ(p.seqs[0].tokens, (std::vector<int32_t>{30, 7, 8, 9}));
  sch.on_step_done(p, std::vector<std::vector<int32_t>>{{7, 8, 9, 31}});  // all accepted, and one more
  EXPECT_EQ(sch.output(1), (std::vector<int32_t>{50, 7, 30, 7, 8, 9, 31}));
  EXPECT_EQ(bm.num_tokens(1), 11);
  // 7 made of 10: at most 2 drafts now.
  p = sch.schedule();
  EXPECT_EQ(p.seqs[0].n_draft, 2);
  sch.on_step_done(p, std::vector<std::vector<int32_t>>{{32}});  // none accepted
  EXPECT_EQ(bm.num_tokens(1), 12);
  sch.abort(1);
  EXPECT_EQ(bm.n_used(), 0);
  EXPECT_EQ(bm.validate(), "");
}

TEST(SchedulerDrafts, ADraftNeverPreemptsItShrinksToTheFreeBlocks) {
  BlockManager bm(3, 4);  // 12 positions
  SchedulerConfig cfg;
  cfg.watermark = 0.0;
  cfg.max_num_batched_tokens = 16;
  cfg.max_num_seqs = 2;
  cfg.num_speculative_tokens = 4;
  Scheduler sch(cfg, bm);
  FixedDrafts drafts;
  drafts.draft = {1, 2, 3, 4};
  sch.set_draft_source(&drafts);
  ASSERT_TRUE(sch.add(Request{.id = 1, .prompt = {5, 5, 5, 5, 5, 5, 5}, .max_tokens = 5}));
  ASSERT_TRUE(sch.add(Request{.id = 2, .prompt = {9, 9}, .max_tokens = 2}));
  StepPlan p = sch.schedule();
  sch.on_step_done(p, std::vector<int32_t>{40, 41});
  // Request 1 holds 2 blocks (7 positions + 1 free), request 2 one: no block is left, so
  // request 1's draft shrinks to the 0 positions its last block has past its decode.
  p = sch.schedule();
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[0].n_draft, 0);
  EXPECT_TRUE(p.preempted.empty());
  EXPECT_EQ(p.seqs[1].n_draft, 0);  // request 2 ends with this token
  sch.on_step_done(p, std::vector<int32_t>{42, 43});
  // Request 2's block is free again: request 1 drafts the 2 that max_tokens leaves room for.
  p = sch.schedule();
  EXPECT_EQ(p.seqs[0].n_draft, 2);
  sch.on_step_done(p, std::vector<std::vector<int32_t>>{{1, 2, 44}});
  EXPECT_EQ(sch.state(1), RequestState::kFinished);
  EXPECT_EQ(bm.n_used(), 0);
}

// A fake model whose token at position p of request id is truth(id, p), and a drafter that is
// right with probability 0.6: whatever is drafted, accepted, preempted or aborted, each
// output is the truth and the block pool stays consistent and ends empty.
int32_t truth(int64_t id, int64_t pos) { return int32_t((id * 7919 + pos * 31) % 50000); }

struct CoinDrafter : DraftSource {
  std::mt19937 rng{7};
  std::vector<int32_t> propose(int64_t id, const std::vector<int32_t>& tokens, int32_t max_k) override {
    std::vector<int32_t> d;
    const int32_t k = int32_t(rng() % uint32_t(max_k + 1));
    for (int32_t i = 0; i < k; ++i) {
      const int64_t pos = int64_t(tokens.size()) + i;
      d.push_back(rng() % 10 < 6 ? truth(id, pos) : truth(id, pos) + 1);
    }
    return d;
  }
};

TEST(SchedulerDrafts, RandomizedRunsKeepTheOutputAndTheBlocks) {
  int64_t preemptions = 0;
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    std::mt19937 rng(seed);
    BlockManager bm(16, 4);
    SchedulerConfig cfg;
    cfg.max_num_batched_tokens = 20;
    cfg.max_num_seqs = 5;
    cfg.watermark = 0.05;
    cfg.num_speculative_tokens = 1 + int32_t(seed % 4);
    Scheduler sch(cfg, bm);
    CoinDrafter drafts;
    sch.set_draft_source(&drafts);
    std::map<int64_t, std::pair<int64_t, int64_t>> added;  // id -> (prompt, max_tokens)
    std::set<int64_t> aborted;
    int64_t next_id = 0, drafted = 0;
    for (int steps = 0; next_id < 40 || sch.has_unfinished(); ++steps) {
      ASSERT_LT(steps, 20000) << "seed " << seed;
      if (next_id < 40 && rng() % 3 == 0) {
        const int n = 1 + int(rng() % 30), m = 1 + int(rng() % 25);
        std::vector<int32_t> prompt(static_cast<size_t>(n), 0);
        for (int i = 0; i < n; ++i) prompt[size_t(i)] = i % 7;  // shared prefixes: cache hits
        if (sch.add(Request{.id = next_id, .prompt = prompt, .max_tokens = m})) added[next_id] = {n, m};
        ++next_id;
      }
      if (!added.empty() && rng() % 30 == 0) {
        const int64_t victim = int64_t(rng() % uint32_t(next_id));
        if (added.count(victim) && sch.state(victim) != RequestState::kFinished) {
          sch.abort(victim);
          aborted.insert(victim);
        }
      }
      const StepPlan plan = sch.schedule();
      preemptions += int64_t(plan.preempted.size());
      std::vector<std::vector<int32_t>> emitted;
      for (const ScheduledSeq& s : plan.seqs) {
        ASSERT_GE(int64_t(s.block_table.size()) * bm.block_size(), s.pos0 + s.n_tokens);
        if (!s.produces_logits) continue;
        drafted += s.n_draft;
        // Row i follows the input at pos0 + (n_tokens - 1 - n_draft) + i.
        const int64_t first = s.pos0 + s.n_tokens - s.n_draft;
        std::vector<int32_t> e;
        for (int32_t i = 0; i <= s.n_draft; ++i) {
          const int32_t want = truth(s.id, first + i);
          e.push_back(want);
          if (i == s.n_draft || s.tokens[size_t(s.n_tokens - s.n_draft + i)] != want) break;
        }
        emitted.push_back(e);
      }
      sch.on_step_done(plan, emitted);
      ASSERT_EQ(bm.validate(), "") << "seed " << seed;
    }
    EXPECT_GT(drafted, 0);
    for (const auto& [id, pm] : added) {
      if (aborted.count(id)) continue;
      std::vector<int32_t> want;
      for (int64_t i = 0; i < pm.second; ++i) want.push_back(truth(id, pm.first + i));
      EXPECT_EQ(sch.output(id), want) << "seed " << seed << " request " << id;
    }
    EXPECT_EQ(bm.n_used(), 0) << "seed " << seed;
  }
  EXPECT_GT(preemptions, 0);
}

// --- end to end on generated models -------------------------------------------------------

struct ModelFixture {
  explicit ModelFixture(Arch arch) {
    GenSpec spec = gen_preset(arch, "tiny");
    spec.type = GgmlType::Q8_0;
    path = testing::write_model(spec, arch == Arch::Deepseek2 ? "spec_deepseek2_tiny_q8_0" : "spec_qwen3moe_tiny_q8_0");
    model = Model::load(path);
    tok.emplace(load_tokenizer(path));
  }
  std::string path;
  std::unique_ptr<Model> model;
  std::optional<Tokenizer> tok;
};

ModelFixture& deepseek() {
  static ModelFixture f(Arch::Deepseek2);
  return f;
}
ModelFixture& qwen() {
  static ModelFixture f(Arch::Qwen3Moe);
  return f;
}

// A prompt that repeats itself, so that n-gram lookup finds drafts in it.
std::vector<int32_t> repetitive_prompt(int n, uint32_t seed) {
  const std::vector<int32_t> motif = prompt_of(7, seed);
  std::vector<int32_t> t;
  while (int(t.size()) < n) t.push_back(motif[t.size() % motif.size()]);
  return t;
}

struct Collector {
  struct Result {
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;
    std::string text;
    RequestOutput last;
    bool finished = false;
  };
  std::map<int64_t, Result> results;
  OutputSink sink() {
    return [this](RequestOutput&& o) {
      Result& r = results[o.id];
      for (const TokenOutput& t : o.tokens) {
        r.tokens.push_back(t.token);
        r.logprobs.push_back(t.logprob);
      }
      r.text += o.text;
      r.finished = o.finished;
      r.last = std::move(o);
    };
  }
};

EngineConfig config(int32_t n_blocks, int64_t budget, int32_t max_seqs, SpeculativeConfig spec = {}) {
  EngineConfig c;
  c.block_size = 16;
  c.n_blocks = n_blocks;
  c.scheduler.max_num_batched_tokens = budget;
  c.scheduler.max_num_seqs = max_seqs;
  c.speculative = spec;
  return c;
}

SpeculativeConfig ngram(int32_t k) {
  SpeculativeConfig c;
  c.method = SpeculativeConfig::Method::kNgram;
  c.num_speculative_tokens = k;
  c.prompt_lookup_min = 1;
  c.prompt_lookup_max = 4;
  return c;
}

void run_to_completion(EngineCore& core) {
  for (int i = 0; core.has_work(); ++i) {
    ASSERT_LT(i, 100000) << "engine did not finish";
    core.step();
  }
}

struct Job {
  std::vector<int32_t> prompt;
  GenerateParams params;
};

// Runs the jobs batched in one engine; the results by job index.
std::map<int64_t, Collector::Result> run_jobs(ModelFixture& f, const std::vector<Job>& jobs, EngineConfig cfg,
                                              std::unique_ptr<DraftSource> drafter = nullptr, EngineMetrics* metrics = nullptr,
                                              int64_t* preemptions = nullptr) {
  ThreadPool pool(2);
  EngineCore core(*f.model, *f.tok, cfg, pool);
  if (drafter) core.set_drafter(std::move(drafter));
  Collector c;
  for (size_t i = 0; i < jobs.size(); ++i) core.add(int64_t(i), jobs[i].prompt, jobs[i].params, c.sink());
  int64_t n_preempted = 0;
  for (int i = 0; core.has_work(); ++i) {
    if (i > 100000) ADD_FAILURE() << "engine did not finish";
    if (i > 100000) break;
    core.step();
    n_preempted = core.metrics().num_preemptions_total;
  }
  EXPECT_EQ(core.blocks().n_used(), 0);
  EXPECT_EQ(core.blocks().validate(), "");
  if (metrics) *metrics = core.metrics();
  if (preemptions) *preemptions = n_preempted;
  return c.results;
}

// Drafts from the reference continuation of each request (by id), each drafted token
// replaced by a wrong one where `right` says no.
struct ScriptedDrafter : DraftSource {
  std::map<int64_t, std::vector<int32_t>> prompt, truth;
  std::function<bool(int64_t pos)> right;
  std::vector<int32_t> propose(int64_t id, const std::vector<int32_t>& tokens, int32_t max_k) override {
    const std::vector<int32_t>& t = truth.at(id);
    const size_t made = tokens.size() - prompt.at(id).size();
    std::vector<int32_t> d;
    for (size_t i = made; i < t.size() && int32_t(d.size()) < max_k; ++i) {
      d.push_back(right(int64_t(i)) ? t[i] : (t[i] + 1) % 400);
    }
    return d;
  }
};

class EndToEnd : public ::testing::TestWithParam<Arch> {
 protected:
  ModelFixture& f() { return GetParam() == Arch::Deepseek2 ? deepseek() : qwen(); }
};

TEST_P(EndToEnd, GreedyNgramOutputEqualsDecodingWithoutDrafts) {
  std::vector<Job> jobs;
  for (int i = 0; i < 6; ++i) jobs.push_back({i % 2 ? repetitive_prompt(20 + 9 * i, 7 + i) : prompt_of(12 + 9 * i, 30 + i), greedy(24)});
  jobs[1].params.sampling.logprobs = true;
  jobs[3].params.sampling.logprobs = true;
  // Penalties count each accepted token before the next row is checked; a bias applies to
  // every row.
  jobs[2].params.sampling.repetition_penalty = 1.3f;
  jobs[4].params.sampling.presence_penalty = 0.5f;
  jobs[4].params.sampling.frequency_penalty = 0.3f;
  jobs[5].params.sampling.logit_bias = {{7, 4.0f}, {12, -100.0f}};
  const auto plain = run_jobs(f(), jobs, config(256, 64, 8));
  for (int32_t k : {1, 3}) {
    EngineMetrics m;
    const auto spec = run_jobs(f(), jobs, config(256, 64, 8, ngram(k)), nullptr, &m);
    for (size_t i = 0; i < jobs.size(); ++i) {
      const auto& a = plain.at(int64_t(i));
      const auto& b = spec.at(int64_t(i));
      EXPECT_EQ(b.tokens, a.tokens) << "k " << k << " request " << i;
      EXPECT_EQ(b.text, a.text) << "k " << k << " request " << i;
      EXPECT_EQ(b.last.finish, FinishKind::kLength);
      ASSERT_EQ(b.logprobs.size(), a.logprobs.size());
      for (size_t j = 0; j < a.logprobs.size(); ++j) EXPECT_NEAR(b.logprobs[j], a.logprobs[j], 2e-3) << "request " << i << " token " << j;
    }
    // Greedy loops of a random model and the repeated prompts give n-gram hits.
    EXPECT_GT(m.spec_decode_num_drafts, 0u) << "k " << k;
    EXPECT_GT(m.spec_decode_num_accepted_tokens, 0u) << "k " << k;
    EXPECT_LE(m.spec_decode_num_accepted_tokens, m.spec_decode_num_draft_tokens);
    EXPECT_EQ(m.generation_tokens_total, jobs.size() * 24);
    ASSERT_EQ(m.spec_decode_accepted_per_pos.size(), size_t(k));
    uint64_t sum = 0;
    for (size_t p = 0; p < m.spec_decode_accepted_per_pos.size(); ++p) {
      sum += m.spec_decode_accepted_per_pos[p];
      if (p > 0) EXPECT_LE(m.spec_decode_accepted_per_pos[p], m.spec_decode_accepted_per_pos[p - 1]);
    }
    EXPECT_EQ(sum, m.spec_decode_num_accepted_tokens);
  }
}

TEST_P(EndToEnd, AlwaysRightAndAlwaysWrongDraftersChangeNothingButTheSteps) {
  std::vector<Job> jobs;
  for (int i = 0; i < 4; ++i) jobs.push_back({prompt_of(10 + 13 * i, 60 + i), greedy(20)});
  const auto plain = run_jobs(f(), jobs, config(256, 64, 8));
  for (bool right : {true, false}) {
    auto d = std::make_unique<ScriptedDrafter>();
    for (size_t i = 0; i < jobs.size(); ++i) {
      d->prompt[int64_t(i)] = jobs[i].prompt;
      d->truth[int64_t(i)] = plain.at(int64_t(i)).tokens;
    }
    d->right = [right](int64_t) { return right; };
    EngineMetrics m;
    const auto spec = run_jobs(f(), jobs, config(256, 64, 8, ngram(3)), std::move(d), &m);
    for (size_t i = 0; i < jobs.size(); ++i) EXPECT_EQ(spec.at(int64_t(i)).tokens, plain.at(int64_t(i)).tokens) << right << " " << i;
    EXPECT_GT(m.spec_decode_num_draft_tokens, 0u);
    EXPECT_EQ(m.spec_decode_num_accepted_tokens, right ? m.spec_decode_num_draft_tokens : 0u);
    for (size_t i = 0; i < jobs.size(); ++i) {
      const RequestOutput& last = spec.at(int64_t(i)).last;
      EXPECT_EQ(last.n_accepted_tokens, right ? last.n_draft_tokens : 0) << i;
      EXPECT_GT(last.n_draft_tokens, 0) << i;
    }
    // Always right: the first token from the prompt, then 4 per step (3 drafts + 1).
    if (right) EXPECT_EQ(m.spec_decode_num_drafts, jobs.size() * 5);
    if (right) continue;
    // Always wrong: 3 drafts, then at most 1, then none but a probe of 1 after 16 steps (19
    // decode steps here); drafting every step, 3 a step.
    for (size_t i = 0; i < jobs.size(); ++i) EXPECT_LE(spec.at(int64_t(i)).last.n_draft_tokens, 3 + 1 + 1) << i;
    auto fixed_drafter = std::make_unique<ScriptedDrafter>();
    for (size_t i = 0; i < jobs.size(); ++i) {
      fixed_drafter->prompt[int64_t(i)] = jobs[i].prompt;
      fixed_drafter->truth[int64_t(i)] = plain.at(int64_t(i)).tokens;
    }
    fixed_drafter->right = [](int64_t) { return false; };
    SpeculativeConfig fixed = ngram(3);
    fixed.adaptive = false;
    const auto every_step = run_jobs(f(), jobs, config(256, 64, 8, fixed), std::move(fixed_drafter), &m);
    for (size_t i = 0; i < jobs.size(); ++i) {
      EXPECT_EQ(every_step.at(int64_t(i)).tokens, plain.at(int64_t(i)).tokens) << i;
      // 3 a step, but the last three steps' drafts shrink to what max_tokens leaves: 2, 1, 0.
      EXPECT_EQ(every_step.at(int64_t(i)).last.n_draft_tokens, 16 * 3 + 2 + 1) << i;
    }
  }
}

// The draft length follows the acceptance: all drafts right, the most; none right, none
// (but probes of one, ever further apart).
TEST(DraftLength, FollowsTheAcceptance) {
  DraftLength right;
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(right.choose(3), 3);
    right.observe(3, 3);
  }
  DraftLength wrong;
  EXPECT_EQ(wrong.choose(3), 3);  // nothing known yet: the prior says drafts are right
  wrong.observe(3, 0);
  EXPECT_EQ(wrong.choose(3), 1);
  wrong.observe(1, 0);
  // Probes of one token, each failed one doubling the wait: after 16, 32, 64, 64, ... steps.
  std::vector<int> probes;
  for (int i = 1; i <= 300; ++i) {
    const int32_t k = wrong.choose(3);
    ASSERT_LE(k, 1);
    if (k == 1) probes.push_back(i);
    wrong.observe(k, 0);
  }
  EXPECT_EQ(probes, (std::vector<int>{16, 48, 112, 176, 240}));
  // A probe that is accepted brings the short wait back.
  wrong.observe(1, 1);
  int32_t steps = 1;
  while (wrong.choose(3) == 0) ++steps;
  EXPECT_LE(steps, DraftLength::kProbeFirst);
  EXPECT_EQ(DraftLength().choose(0), 0);
}

TEST(DraftLength, DraftsLessInABatch) {
  EXPECT_DOUBLE_EQ(DraftLength::cost(1), DraftLength::kCostAlone);
  EXPECT_LT(DraftLength::cost(4), DraftLength::cost(16));
  EXPECT_LT(DraftLength::cost(16), DraftLength::kCostBatched);
  // Under half the drafts right: worth one draft alone (1.43 tokens for 1.4 steps), not
  // among 16 sequences (1.43 for 1.54).
  DraftLength half;
  for (int i = 0; i < 12; ++i) half.observe(1, (i % 5 == 2 || i % 5 == 4) ? 1 : 0);
  ASSERT_GT(half.acceptance(), 0.41);
  ASSERT_LT(half.acceptance(), 0.5);
  DraftLength batched = half;
  EXPECT_EQ(half.choose(3, 1), 1);
  EXPECT_EQ(batched.choose(3, 16), 0);
}

TEST_P(EndToEnd, PreemptedRequestsWithDraftsResumeWithTheSameOutput) {
  std::vector<Job> jobs;
  for (int i = 0; i < 6; ++i) jobs.push_back({repetitive_prompt(30 + 5 * i, 90 + i), greedy(40)});
  const auto plain = run_jobs(f(), jobs, config(256, 64, 8));
  int64_t preempted = 0;
  // 14 blocks of 16 cannot hold six sequences of 70 positions: preemptions.
  const auto spec = run_jobs(f(), jobs, config(14, 64, 8, ngram(3)), nullptr, nullptr, &preempted);
  EXPECT_GT(preempted, 0);
  for (size_t i = 0; i < jobs.size(); ++i) EXPECT_EQ(spec.at(int64_t(i)).tokens, plain.at(int64_t(i)).tokens) << i;
}

TEST_P(EndToEnd, StopAndMaxTokensInsideAnAcceptedRunEndTheOutputThere) {
  const std::vector<int32_t> prompt = prompt_of(20, 5);
  const auto plain = run_jobs(f(), {{prompt, greedy(16)}}, config(64, 64, 4));
  const std::vector<int32_t>& truth = plain.at(0).tokens;
  auto always_right = [&] {
    auto d = std::make_unique<ScriptedDrafter>();
    d->prompt[0] = prompt;
    d->truth[0] = truth;
    d->right = [](int64_t) { return true; };
    return d;
  };
  // A stop token id at output 6: with 3 drafts per step, outputs 1-4 and 5-8 come in runs,
  // so the stop lands inside the second run, which is cut after it.
  GenerateParams p = greedy(16);
  p.stop_token_ids = {truth[6]};
  const size_t first = size_t(std::find(truth.begin(), truth.end(), truth[6]) - truth.begin());
  auto r = run_jobs(f(), {{prompt, p}}, config(64, 64, 4, ngram(3)), always_right());
  EXPECT_EQ(r.at(0).tokens, std::vector<int32_t>(truth.begin(), truth.begin() + std::ptrdiff_t(first + 1)));
  EXPECT_EQ(r.at(0).last.finish, FinishKind::kStop);
  EXPECT_EQ(r.at(0).last.stop_token, truth[6]);
  // max_tokens 6: the drafts are cut so that the run ends exactly at it.
  r = run_jobs(f(), {{prompt, greedy(6)}}, config(64, 64, 4, ngram(3)), always_right());
  EXPECT_EQ(r.at(0).tokens, std::vector<int32_t>(truth.begin(), truth.begin() + 6));
  EXPECT_EQ(r.at(0).last.finish, FinishKind::kLength);
  EXPECT_EQ(r.at(0).last.n_output_tokens, 6);
}

INSTANTIATE_TEST_SUITE_P(Models, EndToEnd, ::testing::Values(Arch::Deepseek2, Arch::Qwen3Moe),
                         [](const auto& info) { return info.param == Arch::Deepseek2 ? std::string("deepseek2") : std::string("qwen3moe"); });

// --- sampled output keeps the target distribution -----------------------------------------

// The probabilities sample() draws with at temperature 1 and top_k 4, from one row.
std::map<int32_t, double> top4(const std::vector<float>& row) {
  std::vector<int32_t> idx(row.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + 4, idx.end(), [&](int32_t a, int32_t b) { return row[size_t(a)] > row[size_t(b)] || (row[size_t(a)] == row[size_t(b)] && a < b); });
  std::map<int32_t, double> p;
  double total = 0.0;
  for (int i = 0; i < 4; ++i) total += std::exp(double(row[size_t(idx[size_t(i)])] - row[size_t(idx[0])]));
  for (int i = 0; i < 4; ++i) p[idx[size_t(i)]] = std::exp(double(row[size_t(idx[size_t(i)])] - row[size_t(idx[0])])) / total;
  return p;
}

// Drafts the token the target finds likeliest after the first output token: taken often,
// turned down often. (A draft that varied over the candidates from request to request
// would hide a wrong acceptance rule in the marginal counted here.)
struct GuessingDrafter : DraftSource {
  std::map<int32_t, int32_t> after;  // first output token -> the target's likeliest next one
  std::vector<int32_t> propose(int64_t, const std::vector<int32_t>& tokens, int32_t max_k) override {
    return std::vector<int32_t>(size_t(max_k), after.at(tokens.back()));
  }
};

TEST(SpeculativeSampling, TheFirstThreeTokensKeepTheirJointDistribution) {
  ModelFixture& f = deepseek();
  ThreadPool pool(2);
  const std::vector<int32_t> prompt = prompt_of(9, 11);
  // The exact joint distribution of (t1, t2, t3) under top_k 4 at temperature 1.
  std::map<std::vector<int32_t>, double> exact;
  auto drafter = std::make_unique<GuessingDrafter>();
  SingleSequence seq(*f.model, 32, kKvDtypeAuto);
  const std::map<int32_t, double> p1 = top4(seq.prefill(prompt, false, pool));
  for (const auto& [t1, q1] : p1) {
    seq.reset();
    seq.prefill(prompt, false, pool);
    const std::map<int32_t, double> p2 = top4(seq.decode(t1, pool));
    drafter->after[t1] = std::max_element(p2.begin(), p2.end(), [](const auto& a, const auto& b) { return a.second < b.second; })->first;
    for (const auto& [t2, q2] : p2) {
      seq.reset();
      seq.prefill(prompt, false, pool);
      seq.decode(t1, pool);
      for (const auto& [t3, q3] : top4(seq.decode(t2, pool))) exact[{t1, t2, t3}] = q1 * q2 * q3;
    }
  }
  ASSERT_EQ(exact.size(), 64u);

  const int n_draws = 4000;
  GenerateParams p;
  p.sampling.temperature = 1.0f;
  p.sampling.top_k = 4;
  p.max_tokens = 3;
  p.ignore_eos = true;
  EngineCore core(*f.model, *f.tok, config(512, 256, 64, ngram(2)), pool);
  core.set_drafter(std::move(drafter));
  Collector c;
  for (int i = 0; i < n_draws; ++i) {
    p.sampling.seed = uint64_t(1000 + i);
    core.add(i, prompt, p, c.sink());
  }
  run_to_completion(core);
  EXPECT_EQ(core.blocks().n_used(), 0);
  EXPECT_GT(core.metrics().spec_decode_num_accepted_tokens, 0u);
  EXPECT_LT(core.metrics().spec_decode_num_accepted_tokens, core.metrics().spec_decode_num_draft_tokens);
  std::map<std::vector<int32_t>, int> seen;
  for (const auto& [id, r] : c.results) {
    ASSERT_EQ(r.tokens.size(), 3u);
    ASSERT_TRUE(exact.count(r.tokens)) << "a sequence outside the top 4";
    ++seen[r.tokens];
  }
  // Pearson's chi-square, cells of expected count below 5 merged into one.
  double chi2 = 0.0, small_expected = 0.0;
  int small_seen = 0, cells = 0;
  for (const auto& [t, q] : exact) {
    const double e = q * n_draws;
    const int o = seen.count(t) ? seen.at(t) : 0;
    if (e < 5.0) {
      small_expected += e;
      small_seen += o;
      continue;
    }
    chi2 += (o - e) * (o - e) / e;
    ++cells;
  }
  if (small_expected > 0.0) {
    chi2 += (small_seen - small_expected) * (small_seen - small_expected) / small_expected;
    ++cells;
  }
  // The 99.9% quantile of chi-square with df degrees of freedom, by Wilson and Hilferty.
  const double df = cells - 1, z = 3.090;
  const double limit = df * std::pow(1.0 - 2.0 / (9.0 * df) + z * std::sqrt(2.0 / (9.0 * df)), 3.0);
  EXPECT_LT(chi2, limit) << cells << " cells";
}

}  // namespace
}  // namespace moe
