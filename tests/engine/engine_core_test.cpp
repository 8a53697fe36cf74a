// The engine step end to end on a tiny generated model: every request's output is checked
// token for token against the plain single-sequence path (prefill, then decode one token at
// a time), whether it ran alone, in a full batch with chunked prefill, after a prefix-cache
// hit or after being preempted; plus stop conditions, aborts and the metrics.
#include <gtest/gtest.h>

#include <map>

#include "core/thread_pool.h"
#include "engine/engine_core.h"
#include "engine/single_sequence.h"
#include "tokenizer/gguf_vocab.h"
#include "test_models.h"
#include "test_requests.h"
#include "tokenizer/stream_decoder.h"

namespace moe {
namespace {

using testing::greedy;
using testing::prompt_of;

struct Fixture {
  Fixture() {
    GenSpec spec = gen_preset(Arch::Deepseek2, "tiny");
    spec.type = GgmlType::Q8_0;
    path = testing::write_model(spec, "engine_core_tiny_q8_0");
    model = Model::load(path);
    tok.emplace(load_tokenizer(path));
  }
  std::string path;
  std::unique_ptr<Model> model;
  std::optional<Tokenizer> tok;
};

Fixture& fx() {
  static Fixture f;
  return f;
}

// Greedy tokens of the reference path: one sequence, its own KV cache.
std::vector<int32_t> reference_greedy(const std::vector<int32_t>& prompt, int n, ThreadPool& pool) {
  SingleSequence seq(*fx().model, int64_t(prompt.size()) + n + 1, kKvDtypeAuto);
  const int64_t n_vocab = fx().model->config().n_vocab;
  std::vector<int32_t> out;
  std::vector<float> logits = seq.prefill(prompt, false, pool);
  for (int i = 0; i < n; ++i) {
    out.push_back(argmax(logits.data(), n_vocab));
    if (i + 1 < n) logits = seq.decode(out.back(), pool);
  }
  return out;
}

// Collects each request's outputs.
struct Collector {
  struct Result {
    std::vector<int32_t> tokens;
    std::string text;
    std::vector<RequestOutput> outputs;
    bool finished() const { return !outputs.empty() && outputs.back().finished; }
    const RequestOutput& last() const { return outputs.back(); }
  };
  std::map<int64_t, Result> results;

  OutputSink sink() {
    return [this](RequestOutput&& o) {
      Result& r = results[o.id];
      for (const TokenOutput& t : o.tokens) r.tokens.push_back(t.token);
      r.text += o.text;
      r.outputs.push_back(std::move(o));
    };
  }
};

EngineConfig config(int32_t n_blocks, int64_t budget, int32_t max_seqs) {
  EngineConfig c;
  c.block_size = 16;
  c.n_blocks = n_blocks;
  c.scheduler.max_num_batched_tokens = budget;
  c.scheduler.max_num_seqs = max_seqs;
  return c;
}

void run_to_completion(EngineCore& core) {
  for (int i = 0; core.has_work(); ++i) {
    ASSERT_LT(i, 100000) << "engine did not finish";
    core.step();
  }
}

TEST(EngineCore, BatchedWithChunkedPrefillEqualsAlone) {
  ThreadPool pool(2);
  const int n_out = 12;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 8; ++i) prompts.push_back(prompt_of(5 + 23 * i, 100 + i));

  // A budget of 48 tokens splits the long prompts into chunks beside the others' decodes.
  EngineCore core(*fx().model, *fx().tok, config(256, 48, 8), pool);
  Collector c;
  for (size_t i = 0; i < prompts.size(); ++i) core.add(int64_t(i), prompts[i], greedy(n_out), c.sink());
  run_to_completion(core);

  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& r = c.results.at(int64_t(i));
    ASSERT_TRUE(r.finished());
    EXPECT_EQ(r.last().finish, FinishKind::kLength);
    EXPECT_EQ(r.last().n_prompt_tokens, int64_t(prompts[i].size()));
    EXPECT_EQ(r.last().n_output_tokens, n_out);
    EXPECT_EQ(r.tokens, reference_greedy(prompts[i], n_out, pool)) << "request " << i;
    EXPECT_EQ(r.text, utf8_sanitize(fx().tok->decode(r.tokens, true))) << "request " << i;
  }
  EXPECT_EQ(core.blocks().n_used(), 0);
  EXPECT_EQ(core.metrics().request_success_total[size_t(FinishKind::kLength)], prompts.size());
  EXPECT_EQ(core.metrics().generation_tokens_total, prompts.size() * n_out);
  EXPECT_EQ(core.metrics().time_to_first_token.count(), prompts.size());
}

TEST(EngineCore, PrefixCacheHitGivesTheSameOutput) {
  ThreadPool pool(2);
  const std::vector<int32_t> shared = prompt_of(40, 7);
  std::vector<int32_t> second = shared;
  for (int32_t t : prompt_of(9, 8)) second.push_back(t);

  EngineCore core(*fx().model, *fx().tok, config(64, 512, 4), pool);
  Collector c;
  core.add(1, shared, greedy(6), c.sink());
  run_to_completion(core);
  core.add(2, second, greedy(6), c.sink());
  run_to_completion(core);

  // 40 prompt tokens fill two whole blocks of 16; the second request reuses both.
  EXPECT_EQ(c.results.at(1).last().n_cached_tokens, 0);
  EXPECT_EQ(c.results.at(2).last().n_cached_tokens, 32);
  EXPECT_EQ(core.metrics().prefix_cache_hits, 32u);
  EXPECT_EQ(c.results.at(1).tokens, reference_greedy(shared, 6, pool));
  EXPECT_EQ(c.results.at(2).tokens, reference_greedy(second, 6, pool));
}

TEST(EngineCore, PreemptedRequestsResumeWithTheSameOutput) {
  ThreadPool pool(2);
  const int n_out = 40;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(prompt_of(20 + 3 * i, 300 + i));

  // 12 blocks of 16 hold 192 positions; the six requests together need about 420, so the
  // least urgent ones are preempted while the others grow, and recomputed later.
  EngineCore core(*fx().model, *fx().tok, config(12, 256, 6), pool);
  Collector c;
  for (size_t i = 0; i < prompts.size(); ++i) core.add(int64_t(i), prompts[i], greedy(n_out), c.sink());
  run_to_completion(core);

  EXPECT_GT(core.metrics().num_preemptions_total, 0u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(c.results.at(int64_t(i)).tokens, reference_greedy(prompts[i], n_out, pool)) << "request " << i;
  }
  EXPECT_EQ(core.blocks().n_used(), 0);
}

TEST(EngineCore, SeededSamplingIsTheSameAloneOrBatched) {
  ThreadPool pool(2);
  GenerateParams p;
  p.sampling.temperature = 1.0f;
  p.sampling.seed = 77;
  p.max_tokens = 10;
  p.ignore_eos = true;
  const std::vector<int32_t> prompt = prompt_of(17, 5);

  EngineCore alone(*fx().model, *fx().tok, config(64, 256, 8), pool);
  Collector a;
  alone.add(1, prompt, p, a.sink());
  run_to_completion(alone);

  EngineCore batched(*fx().model, *fx().tok, config(64, 256, 8), pool);
  Collector b;
  for (int i = 0; i < 5; ++i) {
    GenerateParams other = p;
    other.sampling.seed = 1000 + i;
    batched.add(10 + i, prompt_of(9 + i, 50 + i), other, b.sink());
  }
  batched.add(1, prompt, p, b.sink());
  run_to_completion(batched);
  EXPECT_EQ(a.results.at(1).tokens, b.results.at(1).tokens);
}

TEST(EngineCore, StopTokenAndStopStringEndTheOutput) {
  ThreadPool pool(2);
  const std::vector<int32_t> prompt = prompt_of(11, 21);
  const std::vector<int32_t> ref = reference_greedy(prompt, 12, pool);

  EngineCore core(*fx().model, *fx().tok, config(64, 256, 8), pool);
  Collector c;
  GenerateParams by_token = greedy(12);
  by_token.stop_token_ids = {ref[4]};
  core.add(1, prompt, by_token, c.sink());
  run_to_completion(core);
  const auto& r1 = c.results.at(1);
  const size_t first = size_t(std::find(ref.begin(), ref.end(), ref[4]) - ref.begin());
  EXPECT_EQ(r1.tokens, std::vector<int32_t>(ref.begin(), ref.begin() + std::ptrdiff_t(first) + 1));
  EXPECT_EQ(r1.last().finish, FinishKind::kStop);
  EXPECT_EQ(r1.last().stop_token, ref[4]);

  // A stop string made of the last character one output added and the first character
  // of the next, so it is only found across a token boundary.
  core.add(2, prompt, greedy(12), c.sink());
  run_to_completion(core);
  std::string full;
  size_t boundary = 0;
  for (const RequestOutput& o : c.results.at(2).outputs) {
    const bool ascii_edges = !full.empty() && !o.text.empty() && uint8_t(full.back()) < 0x80 && uint8_t(o.text[0]) < 0x80;
    if (boundary == 0 && ascii_edges && full.size() >= 3) boundary = full.size();
    full += o.text;
  }
  ASSERT_GT(boundary, 0u) << "no token boundary between two ASCII characters in " << full;
  const std::string stop = full.substr(boundary - 1, 2);
  const size_t at = full.find(stop);
  GenerateParams by_string = greedy(12);
  by_string.stop = {"never appears in the output", stop};
  core.add(3, prompt, by_string, c.sink());
  run_to_completion(core);
  const auto& r2 = c.results.at(3);
  EXPECT_EQ(r2.text, full.substr(0, at));
  EXPECT_EQ(r2.last().finish, FinishKind::kStop);
  EXPECT_EQ(r2.last().stop_string, stop);
  EXPECT_EQ(core.blocks().n_used(), 0);
}

TEST(EngineCore, AbortFreesBlocksAtOnceAndOthersContinue) {
  ThreadPool pool(2);
  EngineCore core(*fx().model, *fx().tok, config(64, 256, 8), pool);
  Collector c;
  const std::vector<int32_t> keep = prompt_of(30, 1);
  core.add(1, keep, greedy(8), c.sink());
  core.add(2, prompt_of(60, 2), greedy(200), c.sink());
  core.add(3, prompt_of(20, 3), greedy(8), c.sink());
  core.step();
  core.step();
  EXPECT_GT(core.blocks().n_used(), 0);
  core.abort(2);
  core.abort(3);
  EXPECT_EQ(c.results.at(2).last().finish, FinishKind::kAbort);
  EXPECT_EQ(c.results.at(3).last().finish, FinishKind::kAbort);
  EXPECT_EQ(core.blocks().n_used(), core.blocks().blocks_for(30 + 2));
  core.abort(2);  // already finished: ignored
  run_to_completion(core);
  EXPECT_EQ(c.results.at(1).tokens, reference_greedy(keep, 8, pool));
  EXPECT_EQ(core.blocks().n_used(), 0);
  EXPECT_EQ(core.metrics().kv_cache_usage_perc, 0.0);
  EXPECT_EQ(core.metrics().request_success_total[size_t(FinishKind::kAbort)], 2u);
}

// Prompt logprobs of the reference path: log-softmax of each position's logits.
std::vector<TokenOutput> reference_prompt_logprobs(const std::vector<int32_t>& prompt, int32_t top, ThreadPool& pool) {
  SingleSequence seq(*fx().model, int64_t(prompt.size()) + 1, kKvDtypeAuto);
  const int64_t n_vocab = fx().model->config().n_vocab;
  const std::vector<float> rows = seq.prefill(prompt, true, pool);
  std::vector<TokenOutput> out;
  for (size_t p = 0; p + 1 < prompt.size(); ++p) out.push_back(token_logprobs(rows.data() + p * size_t(n_vocab), n_vocab, prompt[p + 1], top));
  return out;
}

void expect_same_logprobs(const std::vector<TokenOutput>& got, const std::vector<TokenOutput>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].token, want[i].token) << "position " << i + 1;
    EXPECT_NEAR(got[i].logprob, want[i].logprob, 1e-4) << "position " << i + 1;
    ASSERT_EQ(got[i].top.size(), want[i].top.size());
    for (size_t k = 0; k < got[i].top.size(); ++k) {
      EXPECT_EQ(got[i].top[k].token, want[i].top[k].token) << "position " << i + 1;
      EXPECT_NEAR(got[i].top[k].logprob, want[i].top[k].logprob, 1e-4);
    }
  }
}

TEST(EngineCore, PromptLogprobsMatchTheReferenceInChunksAndDespiteTheCache) {
  ThreadPool pool(2);
  const std::vector<int32_t> prompt = prompt_of(70, 5);
  const std::vector<TokenOutput> want = reference_prompt_logprobs(prompt, 3, pool);
  // A 24-token budget prefills the prompt in three chunks beside another request's decodes;
  // request 1 fills the prefix cache with the same prompt first.
  EngineCore core(*fx().model, *fx().tok, config(32, 24, 4), pool);
  Collector c;
  core.add(1, prompt, greedy(3), c.sink());
  run_to_completion(core);
  EXPECT_TRUE(c.results.at(1).outputs.front().prompt_logprobs.empty());
  GenerateParams p = greedy(4);
  p.prompt_logprobs = 3;
  core.add(2, prompt, p, c.sink());
  core.add(3, prompt_of(9, 6), greedy(20), c.sink());
  run_to_completion(core);
  const Collector::Result& r = c.results.at(2);
  expect_same_logprobs(r.outputs.front().prompt_logprobs, want);
  for (size_t i = 1; i < r.outputs.size(); ++i) EXPECT_TRUE(r.outputs[i].prompt_logprobs.empty());
  EXPECT_EQ(r.last().n_cached_tokens, 0) << "prompt logprobs need every position computed";
  EXPECT_EQ(r.tokens, reference_greedy(prompt, 4, pool));
  EXPECT_EQ(core.blocks().n_used(), 0);
}

TEST(EngineCore, PromptLogprobsSurvivePreemption) {
  ThreadPool pool(2);
  const int n_out = 40;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(prompt_of(20 + 7 * i, 400 + i));
  // As above, 12 blocks for about 450 positions, and 16-token prefill chunks.
  EngineCore core(*fx().model, *fx().tok, config(12, 16, 6), pool);
  Collector c;
  GenerateParams p = greedy(n_out);
  p.prompt_logprobs = 2;
  for (size_t i = 0; i < prompts.size(); ++i) core.add(int64_t(i), prompts[i], p, c.sink());
  run_to_completion(core);
  EXPECT_GT(core.metrics().num_preemptions_total, 0u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(i);
    const Collector::Result& r = c.results.at(int64_t(i));
    expect_same_logprobs(r.outputs.front().prompt_logprobs, reference_prompt_logprobs(prompts[i], 2, pool));
    EXPECT_EQ(r.tokens, reference_greedy(prompts[i], n_out, pool));
  }
  EXPECT_EQ(core.blocks().n_used(), 0);
}

TEST(EngineCore, RequestsThatCanNeverRunAreRefusedWithTheField) {
  ThreadPool pool(1);
  EngineConfig cfg = config(8, 256, 8);
  cfg.max_model_len = 100;
  EngineCore core(*fx().model, *fx().tok, cfg, pool);
  auto param_of = [&](std::vector<int32_t> prompt, GenerateParams p) -> std::string {
    try {
      core.add(99, std::move(prompt), p, [](RequestOutput&&) {});
    } catch (const RequestError& e) {
      return e.param() + ": " + e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(param_of({}, greedy(4)), "prompt: the prompt is empty");
  EXPECT_EQ(param_of({1, 100000}, greedy(4)), "prompt: token id 100000 is outside the vocabulary [0, 512)");
  EXPECT_EQ(param_of({1, 2}, greedy(0)), "max_tokens: max_tokens must be at least 1, got 0");
  EXPECT_EQ(param_of(prompt_of(100, 1), greedy(1)),
            "prompt: this model's maximum context length is 100 tokens, but the prompt has 100 tokens");
  EXPECT_EQ(param_of(prompt_of(90, 1), greedy(20)),
            "max_tokens: this model's maximum context length is 100 tokens; the prompt has 90 tokens, so max_tokens "
            "can be at most 10, got 20");
  GenerateParams hot = greedy(4);
  hot.sampling.temperature = -1.0f;
  EXPECT_EQ(param_of({1, 2}, hot), "temperature: temperature must be a finite number >= 0, got -1");
  GenerateParams stop = greedy(4);
  stop.stop_token_ids = {-3};
  EXPECT_EQ(param_of({1, 2}, stop), "stop_token_ids: stop token id -3 is outside the vocabulary [0, 512)");
  GenerateParams bias = greedy(4);
  bias.sampling.logit_bias = {{3, 1.0f}, {512, 5.0f}};
  EXPECT_EQ(param_of({1, 2}, bias), "logit_bias: logit_bias token id 512 is outside the vocabulary [0, 512)");
  GenerateParams plp = greedy(4);
  plp.prompt_logprobs = 21;
  EXPECT_EQ(param_of({1, 2}, plp), "prompt_logprobs: prompt_logprobs must be -1 (off) or in [0, 20], got 21");
  bias.sampling.logit_bias = {{3, -200.0f}};
  EXPECT_EQ(param_of({1, 2}, bias), "logit_bias: logit_bias for token 3 must be in [-100, 100], got -200");
  EXPECT_FALSE(core.has_work());
}

TEST(EngineCore, KvBlocksForMemoryCountTheDtypesBytes) {
  const ModelConfig& c = fx().model->config();
  const double f32_block = double(c.n_layer * c.kv_row_floats() * 16 * 4);
  const int32_t f32_blocks = kv_blocks_for_memory(*fx().model, 1.0, 16, KvDtype::f32);
  EXPECT_EQ(f32_blocks, int32_t(double(1 << 30) / f32_block));
  EXPECT_EQ(kv_blocks_for_memory(*fx().model, 1.0, 16, KvDtype::bf16), int32_t(double(1 << 30) / (f32_block / 2)));
  EXPECT_EQ(kv_blocks_for_memory(*fx().model, 1.0, 16, KvDtype::f16), int32_t(double(1 << 30) / (f32_block / 2)));
  // 8 bits: a scale per 32 values (q8_0), per head and position (fp8: 4 bytes per 64 and
  // per 32 values in this tiny model's rows), so a little under 4x.
  EXPECT_GT(kv_blocks_for_memory(*fx().model, 1.0, 16, KvDtype::q8_0), 3.7 * f32_blocks);
  EXPECT_LT(kv_blocks_for_memory(*fx().model, 1.0, 16, KvDtype::q8_0), 4 * f32_blocks);
  EXPECT_GT(kv_blocks_for_memory(*fx().model, 1.0, 16, KvDtype::fp8_e4m3), 3.6 * f32_blocks);
  EXPECT_LT(kv_blocks_for_memory(*fx().model, 1.0, 16, KvDtype::fp8_e4m3), 4 * f32_blocks);
  EXPECT_THROW(kv_blocks_for_memory(*fx().model, 0.0, 16, KvDtype::f32), Error);
  EXPECT_THROW(kv_blocks_for_memory(*fx().model, 1e-9, 16, KvDtype::f32), Error);
}

}  // namespace
}  // namespace moe
