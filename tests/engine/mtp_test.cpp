// DeepSeek's MTP layer: a file with one (gen-model --nextn-layers 1) loads, and decodes
// exactly as the same file without it; the MTP drafter's proposals inside the scheduler's
// steps (chunked prefill, 1 and 3 chained drafts) equal the layer run by hand over the whole
// sequence; and greedy output with method mtp equals decoding without drafts, batched and
// preempted, with every block returned.
#include <gtest/gtest.h>

#include <map>

#include "core/thread_pool.h"
#include "engine/engine_core.h"
#include "engine/mtp_drafter.h"
#include "engine/single_sequence.h"
#include "test_models.h"
#include "test_requests.h"
#include "tokenizer/gguf_vocab.h"

namespace moe {
namespace {

using testing::greedy;
using testing::prompt_of;

struct Files {
  Files() {
    GenSpec spec = gen_preset(Arch::Deepseek2, "tiny");
    spec.type = GgmlType::Q8_0;
    plain = Model::load(testing::write_model(spec, "mtp_test_plain"));
    spec.n_nextn = 1;
    path = testing::write_model(spec, "mtp_test_nextn");
    mtp = Model::load(path);
    tok.emplace(load_tokenizer(path));
  }
  std::string path;
  std::unique_ptr<Model> plain, mtp;
  std::optional<Tokenizer> tok;
};

Files& files() {
  static Files f;
  return f;
}

std::vector<int32_t> greedy_tokens(Model& m, const std::vector<int32_t>& prompt, int n, ThreadPool& pool) {
  SingleSequence seq(m, int64_t(prompt.size()) + n + 1, kKvDtypeAuto);
  std::vector<int32_t> out;
  std::vector<float> logits = seq.prefill(prompt, false, pool);
  for (int i = 0; i < n; ++i) {
    out.push_back(argmax(logits.data(), m.config().n_vocab));
    logits = seq.decode(out.back(), pool);
  }
  return out;
}

TEST(MtpLayer, AFileWithOneLoadsAndDecodesAsWithout) {
  Files& f = files();
  EXPECT_EQ(f.mtp->n_mtp_layers(), 1);
  EXPECT_EQ(f.plain->n_mtp_layers(), 0);
  EXPECT_EQ(f.mtp->config().n_layer, f.plain->config().n_layer);
  EXPECT_NE(f.mtp->config().summary().find("1 MTP layer"), std::string::npos);
  // The MTP layer is not part of a token's path: the same bytes per token, more in all.
  EXPECT_EQ(f.mtp->active_bytes_per_token(), f.plain->active_bytes_per_token());
  EXPECT_GT(f.mtp->total_weight_bytes(), f.plain->total_weight_bytes());
  ThreadPool pool(2);
  const std::vector<int32_t> prompt = prompt_of(30, 3);
  EXPECT_EQ(greedy_tokens(*f.mtp, prompt, 20, pool), greedy_tokens(*f.plain, prompt, 20, pool));
  EXPECT_THROW(f.plain->make_kv_store(16, 4, kKvDtypeAuto, /*with_mtp=*/true), Error);

  // A step reads the weights once, each MoE layer's experts as many as its tokens chose:
  // one token's worth for one token, more for several (but never the MTP layer's).
  KvStore kv = f.mtp->make_kv_store(16, 4, kKvDtypeAuto);
  const std::vector<int32_t> table{0, 1, 2, 3};
  Step step;
  step.tokens = {5};
  step.seqs.push_back(SeqSlice{&table, 0, 1, LogitRows::kLast});
  std::vector<float> logits(static_cast<size_t>(f.mtp->config().n_vocab), 0.0f);
  f.mtp->forward(step, kv, logits.data(), pool);
  EXPECT_EQ(f.mtp->last_step_weight_bytes(), f.mtp->active_bytes_per_token());
  step.tokens = {6, 7, 8, 9};
  step.seqs[0] = SeqSlice{&table, 1, 4, LogitRows::kLast};
  f.mtp->forward(step, kv, logits.data(), pool);
  EXPECT_GT(f.mtp->last_step_weight_bytes(), f.mtp->active_bytes_per_token());
}

// The layer by hand: the main model over the whole sequence for its hidden states, then the
// MTP layer over positions 0..p (each with the next token), and its own output chained
// k - 1 times: the drafts after position p.
std::vector<int32_t> reference_drafts(Model& m, const std::vector<int32_t>& seq, int64_t p, int k, ThreadPool& pool) {
  const int64_t n_embd = m.config().n_embd, n_vocab = m.config().n_vocab;
  const std::vector<int32_t> table{0, 1, 2, 3, 4, 5, 6, 7};
  KvStore kv = m.make_kv_store(16, 8, kKvDtypeAuto, /*with_mtp=*/true);
  Step main;
  main.tokens.assign(seq.begin(), seq.begin() + p + 1);
  main.seqs.push_back(SeqSlice{&table, 0, p + 1, LogitRows::kLast});
  main.want_hidden = true;
  std::vector<float> logits(static_cast<size_t>(n_vocab), 0.0f);
  m.forward(main, kv, logits.data(), pool);
  std::vector<float> hidden(m.hidden_states(), m.hidden_states() + (p + 1) * n_embd);
  Step step;
  step.tokens.assign(seq.begin() + 1, seq.begin() + p + 2);
  step.seqs.push_back(SeqSlice{&table, 0, p + 1, LogitRows::kLast});
  std::vector<float> out(size_t((p + 1) * n_embd));
  m.forward_mtp(step, hidden.data(), kv, logits.data(), out.data(), pool);
  std::vector<int32_t> d{argmax(logits.data(), n_vocab)};
  std::vector<float> h(out.end() - n_embd, out.end());
  while (int(d.size()) < k) {
    Step one;
    one.tokens = {d.back()};
    one.seqs.push_back(SeqSlice{&table, p + int64_t(d.size()), 1, LogitRows::kLast});
    std::vector<float> next(static_cast<size_t>(n_embd), 0.0f);
    m.forward_mtp(one, h.data(), kv, logits.data(), next.data(), pool);
    d.push_back(argmax(logits.data(), n_vocab));
    h = next;
  }
  return d;
}

TEST(MtpDrafter, ProposalsEqualTheLayerRunByHand) {
  Files& f = files();
  Model& m = *f.mtp;
  ThreadPool pool(2);
  for (int k : {1, 3}) {
    BlockManager bm(64, 16);
    SchedulerConfig sc;
    sc.max_num_batched_tokens = 24;  // the 40-token prompt comes in two chunks
    sc.max_num_seqs = 2;
    Scheduler sch(sc, bm);
    KvStore kv = m.make_kv_store(16, 64 + MtpDrafter::scratch_blocks(k, 16, 2), kKvDtypeAuto, /*with_mtp=*/true);
    MtpDrafter drafter(m, kv, k, 64, 2);
    const std::vector<int32_t> prompt = prompt_of(40, 17);
    ASSERT_TRUE(sch.add(Request{.id = 7, .prompt = prompt, .max_tokens = 12}));
    int checked = 0;
    while (sch.has_unfinished()) {
      const StepPlan plan = sch.schedule();
      Step step;
      for (const ScheduledSeq& s : plan.seqs) {
        step.tokens.insert(step.tokens.end(), s.tokens.begin(), s.tokens.end());
        step.seqs.push_back(SeqSlice{&s.block_table, s.pos0, s.n_tokens, s.produces_logits ? LogitRows::kLast : LogitRows::kNone});
      }
      step.want_hidden = true;
      std::vector<float> logits(size_t(step.n_logit_rows() * m.config().n_vocab));
      m.forward(step, kv, logits.data(), pool);
      std::vector<std::vector<int32_t>> emitted;
      for (const ScheduledSeq& s : plan.seqs) {
        if (s.produces_logits) emitted.push_back({argmax(logits.data(), m.config().n_vocab)});
      }
      drafter.after_step(plan, emitted, m.hidden_states(), [&](int64_t id) { return sch.running_tokens(id); }, pool);
      sch.on_step_done(plan, emitted);
      const std::vector<int32_t>* tokens = sch.running_tokens(7);
      if (tokens && tokens->size() > prompt.size()) {
        const std::vector<int32_t> got = drafter.propose(7, *tokens, k);
        ASSERT_EQ(int(got.size()), k) << "after " << tokens->size() << " tokens";
        EXPECT_EQ(got, reference_drafts(m, *tokens, int64_t(tokens->size()) - 2, k, pool)) << "k " << k << ", " << tokens->size() << " tokens";
        // Drafts continue exactly the tokens they were made after.
        std::vector<int32_t> other = *tokens;
        other.push_back(1);
        EXPECT_TRUE(drafter.propose(7, other, k).empty());
        ++checked;
      }
    }
    EXPECT_EQ(checked, 11);
  }
}

SpeculativeConfig mtp(int32_t k) {
  SpeculativeConfig c;
  c.method = SpeculativeConfig::Method::kMtp;
  c.num_speculative_tokens = k;
  return c;
}

std::map<int64_t, std::vector<int32_t>> run(const std::vector<std::vector<int32_t>>& prompts, int32_t n_blocks, SpeculativeConfig spec,
                                            EngineMetrics* metrics = nullptr) {
  Files& f = files();
  ThreadPool pool(2);
  EngineConfig c;
  c.n_blocks = n_blocks;
  c.scheduler.max_num_batched_tokens = 64;
  c.scheduler.max_num_seqs = 8;
  c.speculative = spec;
  EngineCore core(*f.mtp, *f.tok, c, pool);
  std::map<int64_t, std::vector<int32_t>> out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    core.add(int64_t(i), prompts[i], greedy(30), [&out](RequestOutput&& o) {
      for (const TokenOutput& t : o.tokens) out[o.id].push_back(t.token);
    });
  }
  for (int i = 0; core.has_work() && i < 100000; ++i) core.step();
  EXPECT_EQ(core.blocks().n_used(), 0);
  if (metrics) *metrics = core.metrics();
  return out;
}

TEST(MtpEngine, GreedyOutputEqualsDecodingWithoutDrafts) {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(prompt_of(10 + 17 * i, 50 + i));
  const auto plain = run(prompts, 256, {});
  for (int32_t k : {1, 3}) {
    EngineMetrics m;
    EXPECT_EQ(run(prompts, 256, mtp(k), &m), plain) << "k " << k;
    EXPECT_GT(m.spec_decode_num_draft_tokens, 0u);
    // Preempted for lack of blocks: recomputed, the same tokens.
    EngineMetrics small;
    EXPECT_EQ(run(prompts, 16, mtp(k), &small), plain) << "k " << k << " preempted";
    EXPECT_GT(small.num_preemptions_total, 0u);
  }
}

TEST(MtpEngine, AFileWithoutTheLayerIsRefusedNamingTheField) {
  Files& f = files();
  ThreadPool pool(1);
  EngineConfig c;
  c.n_blocks = 8;
  c.speculative = mtp(1);
  try {
    EngineCore core(*f.plain, *f.tok, c, pool);
    FAIL() << "no error";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.param(), "speculative_config");
    EXPECT_NE(std::string(e.what()).find("needs the model's MTP layer, and the file has none"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moe
