// The continuous-batching scheduler against a real BlockManager and a fake "model" whose
// sampled token is a function of (request, position): budgets and caps every step, decode
// priority over prefill, chunked prefill, prefix-cache skips, FCFS vs priority, preemption
// by recompute (output identical to an unpreempted run), abort, and a randomized run.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

namespace moe {
namespace {

std::vector<int32_t> toks(int n, int32_t start = 100) {
  std::vector<int32_t> t(size_t(n), 0);
  std::iota(t.begin(), t.end(), start);
  return t;
}

// What a deterministic model would sample after the token at position pos.
int32_t fake_token(int64_t id, int64_t pos) { return int32_t((id * 7919 + pos * 31) % 50000); }

// Invariants every plan must satisfy; returns the sampled tokens for it.
std::vector<int32_t> check_and_sample(const Scheduler& sch, const BlockManager& bm,
                                      const SchedulerConfig& cfg, const StepPlan& plan) {
  EXPECT_LE(plan.n_batched_tokens, cfg.max_num_batched_tokens);
  EXPECT_LE(int64_t(plan.seqs.size()), cfg.max_num_seqs);
  int64_t total = 0;
  std::set<int64_t> ids;
  std::vector<int32_t> sampled;
  for (const ScheduledSeq& s : plan.seqs) {
    EXPECT_TRUE(ids.insert(s.id).second) << "seq " << s.id << " twice in one step";
    EXPECT_GT(s.n_tokens, 0);
    EXPECT_EQ(int64_t(s.tokens.size()), s.n_tokens);
    EXPECT_GE(int64_t(s.block_table.size()) * bm.block_size(), s.pos0 + s.n_tokens);
    EXPECT_EQ(sch.state(s.id), RequestState::kRunning);
    total += s.n_tokens;
    if (s.produces_logits) sampled.push_back(fake_token(s.id, s.pos0 + s.n_tokens));
  }
  EXPECT_EQ(total, plan.n_batched_tokens);
  EXPECT_EQ(bm.validate(), "");
  std::set<int64_t> run(sch.running().begin(), sch.running().end());
  for (int64_t w : sch.waiting()) EXPECT_EQ(run.count(w), 0u) << w << " running and waiting";
  EXPECT_EQ(run.size(), sch.running().size());
  return sampled;
}

// Runs to completion; returns the number of steps.
int run_all(Scheduler& sch, BlockManager& bm, const SchedulerConfig& cfg, int max_steps = 10000) {
  int steps = 0;
  while (sch.has_unfinished()) {
    StepPlan plan = sch.schedule();
    EXPECT_FALSE(plan.empty()) << "no progress with requests pending";
    if (plan.empty()) break;
    sch.on_step_done(plan, check_and_sample(sch, bm, cfg, plan));
    if (++steps > max_steps) {
      ADD_FAILURE() << "did not finish";
      break;
    }
  }
  return steps;
}

std::vector<int32_t> expected_output(int64_t id, int64_t prompt_len, int64_t max_tokens) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < max_tokens; ++i) out.push_back(fake_token(id, prompt_len + i));
  return out;
}

TEST(Scheduler, LongPromptIsChunkedBesideDecodesWithCorrectPositions) {
  BlockManager bm(64, 4);
  SchedulerConfig cfg{.max_num_batched_tokens = 8, .max_num_seqs = 4};
  Scheduler sch(cfg, bm);
  ASSERT_TRUE(sch.add({1, toks(3), 5}));
  StepPlan p = sch.schedule();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_TRUE(p.seqs[0].produces_logits);
  sch.on_step_done(p, check_and_sample(sch, bm, cfg, p));
  // Request 1 now decodes; a 20-token prompt arrives and must be prefilled in chunks of
  // the 7 tokens the decode leaves, at positions 0, 7, 14.
  ASSERT_TRUE(sch.add({2, toks(20, 500), 2}));
  std::vector<int64_t> pos0s;
  for (int step = 0; step < 3; ++step) {
    p = sch.schedule();
    ASSERT_EQ(p.seqs.size(), 2u);
    EXPECT_EQ(p.seqs[0].id, 1);  // the decode comes first and is never left out
    EXPECT_EQ(p.seqs[0].n_tokens, 1);
    EXPECT_TRUE(p.seqs[0].produces_logits);
    EXPECT_EQ(p.seqs[1].id, 2);
    pos0s.push_back(p.seqs[1].pos0);
    EXPECT_EQ(p.seqs[1].produces_logits, step == 2);  // only the chunk ending the prompt
    EXPECT_EQ(p.seqs[1].tokens.front(), 500 + p.seqs[1].pos0);
    sch.on_step_done(p, check_and_sample(sch, bm, cfg, p));
  }
  EXPECT_EQ(pos0s, (std::vector<int64_t>{0, 7, 14}));
  run_all(sch, bm, cfg);
  EXPECT_EQ(sch.output(1), expected_output(1, 3, 5));
  EXPECT_EQ(sch.output(2), expected_output(2, 20, 2));
  EXPECT_EQ(sch.finish_reason(2), FinishReason::kLength);
  EXPECT_EQ(bm.n_used(), 0);
}

TEST(Scheduler, SeqCapAndBudgetHoldAndDecodesAreNotStarved) {
  BlockManager bm(256, 4);
  SchedulerConfig cfg{.max_num_batched_tokens = 16, .max_num_seqs = 3};
  Scheduler sch(cfg, bm);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(sch.add({i, toks(10 + i), 6}));
  // Each running request decodes in every step after its prompt is done: its outputs
  // arrive one per step without gaps, whatever prefills are pending.
  std::map<int64_t, int> last_decode_step;
  int step = 0;
  while (sch.has_unfinished()) {
    StepPlan p = sch.schedule();
    EXPECT_LE(p.seqs.size(), 3u);
    EXPECT_LE(p.n_batched_tokens, 16);
    for (int64_t id : sch.running()) {
      auto it = std::find_if(p.seqs.begin(), p.seqs.end(),
                             [&](const ScheduledSeq& s) { return s.id == id; });
      if (last_decode_step.count(id)) {
        ASSERT_NE(it, p.seqs.end()) << "decode of " << id << " skipped at step " << step;
        EXPECT_EQ(it->n_tokens, 1);
      }
    }
    for (const ScheduledSeq& s : p.seqs)
      if (s.produces_logits) last_decode_step[s.id] = step;
    sch.on_step_done(p, check_and_sample(sch, bm, cfg, p));
    ++step;
    ASSERT_LT(step, 1000);
  }
  for (int i = 0; i < 8; ++i) EXPECT_EQ(sch.output(i), expected_output(i, 10 + i, 6));
}

TEST(Scheduler, PrefixCacheHitSkipsCachedTokens) {
  BlockManager bm(64, 4);
  SchedulerConfig cfg{.max_num_batched_tokens = 64, .max_num_seqs = 4};
  Scheduler sch(cfg, bm);
  ASSERT_TRUE(sch.add({1, toks(13), 1}));
  run_all(sch, bm, cfg);
  std::vector<int32_t> p2 = toks(13);
  p2.push_back(7);
  p2.push_back(8);
  ASSERT_TRUE(sch.add({2, p2, 1}));
  StepPlan p = sch.schedule();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].pos0, 12);  // 3 full blocks of the first prompt were cached
  EXPECT_EQ(p.seqs[0].n_tokens, 3);
  EXPECT_EQ(p.seqs[0].tokens, (std::vector<int32_t>{112, 7, 8}));
  sch.on_step_done(p, check_and_sample(sch, bm, cfg, p));
  EXPECT_EQ(sch.state(2), RequestState::kFinished);
}

TEST(Scheduler, FcfsAndPriorityOrderAdmission) {
  for (auto policy : {SchedulerConfig::Policy::kFcfs, SchedulerConfig::Policy::kPriority}) {
    BlockManager bm(64, 4);
    SchedulerConfig cfg{.max_num_batched_tokens = 4, .max_num_seqs = 1, .policy = policy};
    Scheduler sch(cfg, bm);
    ASSERT_TRUE(sch.add({1, toks(4), 1, /*priority=*/5}));
    ASSERT_TRUE(sch.add({2, toks(4), 1, 0}));
    ASSERT_TRUE(sch.add({3, toks(4), 1, 0}));
    std::vector<int64_t> order;
    while (sch.has_unfinished()) {
      StepPlan p = sch.schedule();
      ASSERT_EQ(p.seqs.size(), 1u);
      order.push_back(p.seqs[0].id);
      sch.on_step_done(p, check_and_sample(sch, bm, cfg, p));
    }
    if (policy == SchedulerConfig::Policy::kFcfs)
      EXPECT_EQ(order, (std::vector<int64_t>{1, 2, 3}));
    else
      EXPECT_EQ(order, (std::vector<int64_t>{2, 3, 1}));  // ties broken by arrival
  }
}

TEST(Scheduler, PreemptionUnderBlockPressureResumesExactly) {
  // 8 blocks of 4: two requests of 8-token prompts fit (4 blocks) but cannot both grow to
  // 8 + 12 tokens (10 blocks); the later one is preempted and must still finish with the
  // same output an unpreempted run gives.
  BlockManager bm(8, 4);
  SchedulerConfig cfg{.max_num_batched_tokens = 32, .max_num_seqs = 4, .watermark = 0.0};
  Scheduler sch(cfg, bm);
  ASSERT_TRUE(sch.add({1, toks(8), 12}));
  ASSERT_TRUE(sch.add({2, toks(8, 300), 12}));
  bool saw_preempt = false;
  while (sch.has_unfinished()) {
    int32_t used_before = bm.n_used();
    StepPlan p = sch.schedule();
    for (int64_t v : p.preempted) {
      saw_preempt = true;
      EXPECT_EQ(v, 2);  // the most recently arrived of equal priority
      EXPECT_EQ(sch.state(v), RequestState::kWaiting);
      EXPECT_FALSE(bm.has(v));
      EXPECT_LE(bm.n_used(), used_before + 1);
    }
    ASSERT_FALSE(p.empty());
    sch.on_step_done(p, check_and_sample(sch, bm, cfg, p));
  }
  EXPECT_TRUE(saw_preempt);
  EXPECT_GE(sch.n_preemptions(2), 1);
  EXPECT_EQ(sch.output(1), expected_output(1, 8, 12));
  EXPECT_EQ(sch.output(2), expected_output(2, 8, 12));
  EXPECT_EQ(bm.n_used(), 0);
  EXPECT_EQ(bm.validate(), "");
}

TEST(Scheduler, AbortFreesBlocksAndImpossibleRequestIsRejected) {
  BlockManager bm(8, 4);
  SchedulerConfig cfg{.max_num_batched_tokens = 8, .max_num_seqs = 4, .watermark = 0.0};
  Scheduler sch(cfg, bm);
  ASSERT_TRUE(sch.add({1, toks(12), 4}));
  ASSERT_TRUE(sch.add({2, toks(4, 900), 4}));
  StepPlan p = sch.schedule();  // admits 1 (first chunk of 8)
  EXPECT_GT(bm.n_used(), 0);
  std::vector<int32_t> sampled = check_and_sample(sch, bm, cfg, p);
  sch.abort(1);  // between schedule and on_step_done: its result must be dropped
  EXPECT_EQ(bm.n_used(), 0);
  sch.on_step_done(p, sampled);
  EXPECT_EQ(bm.n_used(), 0);
  EXPECT_EQ(bm.validate(), "");
  EXPECT_EQ(sch.finish_reason(1), FinishReason::kAborted);
  sch.abort(2);  // a waiting one
  EXPECT_EQ(sch.finish_reason(2), FinishReason::kAborted);
  EXPECT_FALSE(sch.has_unfinished());

  EXPECT_FALSE(sch.add({3, toks(30), 3}));  // 33 positions > 32 the cache holds
  EXPECT_EQ(sch.finish_reason(3), FinishReason::kRejected);
  EXPECT_NE(sch.reject_reason(3).find("KV blocks"), std::string::npos);
  EXPECT_FALSE(sch.add({4, {}, 3}));
  EXPECT_TRUE(sch.add({5, toks(28), 4}));  // exactly the whole cache: must run alone
  run_all(sch, bm, cfg);
  EXPECT_EQ(sch.output(5), expected_output(5, 28, 4));
  // A stop from the caller ends a running request and frees it.
  ASSERT_TRUE(sch.add({6, toks(5), 10}));
  p = sch.schedule();
  sch.on_step_done(p, check_and_sample(sch, bm, cfg, p));
  sch.finish(6);
  EXPECT_EQ(sch.finish_reason(6), FinishReason::kStopped);
  EXPECT_EQ(sch.output(6).size(), 1u);
  EXPECT_EQ(bm.n_used(), 0);
}

TEST(Scheduler, RandomizedSimulationRunsToCompletion) {
  int64_t total_preemptions = 0;
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    std::mt19937 rng(seed);
    BlockManager bm(40, 4);
    SchedulerConfig cfg{.max_num_batched_tokens = 24, .max_num_seqs = 6, .watermark = 0.05,
                        .policy = seed % 2 ? SchedulerConfig::Policy::kFcfs
                                           : SchedulerConfig::Policy::kPriority};
    Scheduler sch(cfg, bm);
    std::map<int64_t, std::pair<int64_t, int64_t>> accepted;  // id -> (prompt, max_tokens)
    std::set<int64_t> aborted;
    int64_t next_id = 0;
    int steps = 0;
    // Shared prefixes make prefix hits (and evictions) part of the run.
    auto prompt = [&](int n) {
      std::vector<int32_t> t = toks(n, int32_t(rng() % 3) * 1000);
      if (rng() % 2) t.back() = int32_t(rng() % 100000);
      return t;
    };
    while (next_id < 60 || sch.has_unfinished()) {
      if (next_id < 60 && rng() % 3 == 0) {
        int n = 1 + int(rng() % 40);
        int64_t m = 1 + int64_t(rng() % 30);
        if (sch.add({next_id, prompt(n), m, int32_t(rng() % 3)})) accepted[next_id] = {n, m};
        ++next_id;
      }
      if (!accepted.empty() && rng() % 25 == 0) {
        int64_t victim = int64_t(rng() % uint32_t(next_id));
        if (accepted.count(victim) && sch.state(victim) != RequestState::kFinished) {
          sch.abort(victim);
          aborted.insert(victim);
        }
      }
      StepPlan p = sch.schedule();
      sch.on_step_done(p, check_and_sample(sch, bm, cfg, p));
      ASSERT_LT(++steps, 20000) << "seed " << seed;
    }
    for (auto& [id, pm] : accepted) {
      ASSERT_EQ(sch.state(id), RequestState::kFinished);
      total_preemptions += sch.n_preemptions(id);
      if (aborted.count(id)) continue;
      EXPECT_EQ(sch.finish_reason(id), FinishReason::kLength);
      EXPECT_EQ(sch.output(id), expected_output(id, pm.first, pm.second)) << "seed " << seed;
    }
    EXPECT_EQ(bm.n_used(), 0);
    EXPECT_EQ(bm.validate(), "");
  }
  EXPECT_GT(total_preemptions, 0);  // the block pressure is part of what is tested
}

TEST(Scheduler, PromptLogitsSkipTheCacheAndBoundTheirChunks) {
  SchedulerConfig cfg;
  cfg.max_num_batched_tokens = 2048;
  BlockManager bm(128, 16);
  Scheduler sch(cfg, bm);
  ASSERT_TRUE(sch.add(Request{1, toks(600), 2}));
  run_all(sch, bm, cfg);
  // The same prompt again: a plain request reuses the cached blocks, a prompt-logits one
  // prefills all 600 positions in bounded chunks that produce every row.
  Request plain{2, toks(600), 2};
  Request scored{3, toks(600), 2};
  scored.prompt_logits = true;
  ASSERT_TRUE(sch.add(plain));
  ASSERT_TRUE(sch.add(scored));
  std::vector<int64_t> chunks;
  int64_t plain_pos0 = -1;
  while (sch.has_unfinished()) {
    const StepPlan plan = sch.schedule();
    for (const ScheduledSeq& s : plan.seqs) {
      if (s.id == 2 && plain_pos0 < 0) plain_pos0 = s.pos0;
      if (s.id == 3 && s.all_logits) {
        EXPECT_EQ(s.pos0, std::accumulate(chunks.begin(), chunks.end(), int64_t(0)));
        EXPECT_EQ(s.n_logit_rows(), s.n_tokens);
        chunks.push_back(s.n_tokens);
      }
      if (s.id == 3 && !s.all_logits) {
        EXPECT_EQ(s.n_logit_rows(), 1) << "decodes sample one row";
      }
    }
    sch.on_step_done(plan, check_and_sample(sch, bm, cfg, plan));
  }
  EXPECT_EQ(plain_pos0, 592) << "the plain request starts after its cached blocks";
  EXPECT_EQ(chunks, (std::vector<int64_t>{256, 256, 88}));
  EXPECT_EQ(bm.validate(), "");
}

}  // namespace
}  // namespace moe
