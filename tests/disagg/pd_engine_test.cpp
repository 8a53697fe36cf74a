// The prefill/decode hand-off at the engine level, with the KV copied between two engines'
// pools by the same block reads the transports carry: a prompt prefilled on one engine
// (remote_decode) and decoded on another (add_remote) gives token for token, and text for
// text, what one unified engine gives: greedy and seeded, batched, with prefix-cache hits
// on the decode side, when the load fails and the decode side recomputes, and across a
// stop string that spans the hand-off. Leases free their blocks on release or expiry.
// Drafting with the MTP layer, the layer's KV and first drafts cross with the hand-off.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "core/thread_pool.h"
#include "disagg/kv_layout.h"
#include "engine/engine_core.h"
#include "engine/test_models.h"
#include "engine/test_requests.h"
#include "tokenizer/gguf_vocab.h"

namespace moe {
namespace {

using testing::greedy;
using testing::prompt_of;

struct Fixture {
  Fixture() {
    GenSpec spec = gen_preset(Arch::Deepseek2, "tiny");
    spec.type = GgmlType::Q8_0;
    path = testing::write_model(spec, "pd_engine_tiny_q8_0");
    model = Model::load(path);
    tok.emplace(load_tokenizer(path));
    spec.n_nextn = 1;
    with_mtp = Model::load(testing::write_model(spec, "pd_engine_tiny_q8_0_mtp"));
  }
  std::string path;
  std::unique_ptr<Model> model, with_mtp;
  std::optional<Tokenizer> tok;
};

Fixture& fx() {
  static Fixture f;
  return f;
}

EngineConfig config(int32_t n_blocks, KvDtype kv_dtype = kKvDtypeAuto) {
  EngineConfig c;
  c.kv_dtype = kv_dtype;
  c.block_size = 16;
  c.n_blocks = n_blocks;
  c.scheduler.max_num_batched_tokens = 64;
  c.scheduler.max_num_seqs = 16;
  return c;
}

struct Result {
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<RequestOutput> outputs;
  bool finished() const { return !outputs.empty() && outputs.back().finished; }
  const RequestOutput& last() const { return outputs.back(); }
};

struct Collector {
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

void run(EngineCore& core) {
  for (int i = 0; core.has_work(); ++i) {
    ASSERT_LT(i, 100000) << "engine did not finish";
    if (!core.step()) return;  // only requests waiting for their KV are left
  }
}

// Copies a hand-off's blocks from P's pool into the blocks D reserved, from D's first
// uncached block on, as a transport would.
void pull(EngineCore& p, const KvBlocks& from, EngineCore& d, const KvBlocks& to) {
  const disagg::KvGeometry pg = disagg::kv_geometry(p.kv()), dg = disagg::kv_geometry(d.kv());
  const size_t n = size_t((to.n_tokens + pg.block_size - 1) / pg.block_size);
  const size_t first = size_t(to.n_cached / dg.block_size);
  const auto* src = reinterpret_cast<const char*>(p.kv().data());
  auto* dst = reinterpret_cast<char*>(d.kv().data());
  for (const disagg::ReadOp& op : disagg::kv_block_reads(pg, from.table, dg, to.table, first, n)) {
    std::memcpy(dst + op.local_offset, src + op.remote_offset, op.bytes);
  }
}

// What one unified engine makes of the requests.
std::vector<Result> unified(const std::vector<std::vector<int32_t>>& prompts, const std::vector<GenerateParams>& params,
                            ThreadPool& pool, KvDtype kv_dtype = kKvDtypeAuto) {
  EngineCore core(*fx().model, *fx().tok, config(512, kv_dtype), pool);
  Collector c;
  for (size_t i = 0; i < prompts.size(); ++i) core.add(int64_t(i), prompts[i], params[i], c.sink());
  run(core);
  std::vector<Result> out;
  for (size_t i = 0; i < prompts.size(); ++i) out.push_back(c.results.at(int64_t(i)));
  return out;
}

// Prefill on p, pull into d, decode on d; the outputs of both halves joined. ok_load false:
// d is told the load failed and recomputes.
struct Disaggregated {
  std::vector<Result> joined;
  std::vector<int64_t> n_cached_on_d;
};

Disaggregated disaggregated(EngineCore& p, EngineCore& d, const std::vector<std::vector<int32_t>>& prompts,
                            const std::vector<GenerateParams>& params, bool ok_load = true) {
  Collector pc, dc;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateParams pp = params[i];
    pp.remote_decode = true;
    p.add(int64_t(i), prompts[i], pp, pc.sink());
  }
  run(p);
  Disaggregated out;
  out.joined.resize(prompts.size());
  out.n_cached_on_d.assign(prompts.size(), -1);
  std::map<int64_t, KvBlocks> handed;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Result& r = pc.results.at(int64_t(i));
    EXPECT_TRUE(r.finished());
    out.joined[i] = r;
    if (!r.last().kv) continue;  // the first token ended it
    EXPECT_EQ(r.tokens.size(), 1u);
    EXPECT_EQ(r.last().finish, FinishKind::kLength);
    handed[int64_t(i)] = *r.last().kv;
    d.add_remote(int64_t(i), prompts[i], r.tokens[0], params[i], dc.sink(), Clock::now(), r.last().kv->draft_tokens);
  }
  // The first step admits them and announces the blocks to fill.
  run(d);
  for (auto& [id, kv] : handed) {
    const Result& r = dc.results.at(id);
    EXPECT_EQ(r.outputs.size(), 1u);
    EXPECT_TRUE(r.outputs[0].kv.has_value());
    if (!r.outputs[0].kv) continue;
    const KvBlocks& to = *r.outputs[0].kv;
    out.n_cached_on_d[size_t(id)] = to.n_cached;
    if (ok_load) pull(p, kv, d, to);
    d.kv_loaded(id, ok_load);
    EXPECT_EQ(p.release_lease(id), LeaseRelease::kReleased);
  }
  run(d);
  for (auto& [id, kv] : handed) {
    Result& j = out.joined[size_t(id)];
    const Result& r = dc.results.at(id);
    EXPECT_TRUE(r.finished());
    j.tokens.insert(j.tokens.end(), r.tokens.begin(), r.tokens.end());
    j.text += r.text;
    j.outputs.push_back(r.last());
  }
  return out;
}

void expect_same(const std::vector<Result>& want, const std::vector<Result>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    EXPECT_EQ(got[i].text, want[i].text) << "request " << i;
    EXPECT_EQ(got[i].last().finish, want[i].last().finish) << "request " << i;
    EXPECT_EQ(got[i].last().n_output_tokens, want[i].last().n_output_tokens) << "request " << i;
    EXPECT_EQ(got[i].last().n_prompt_tokens, want[i].last().n_prompt_tokens) << "request " << i;
  }
}

TEST(PdEngine, GreedyBatchedPromptsOfManyBlocksEqualUnified) {
  ThreadPool pool(2);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GenerateParams> params;
  for (int i = 0; i < 16; ++i) {
    prompts.push_back(prompt_of(3 + 19 * i, 200 + uint32_t(i)));  // 3 to 288 tokens: up to 19 blocks
    params.push_back(greedy(10));
  }
  EngineCore p(*fx().model, *fx().tok, config(512), pool);
  EngineCore d(*fx().model, *fx().tok, config(512), pool);
  const Disaggregated got = disaggregated(p, d, prompts, params);
  expect_same(unified(prompts, params, pool), got.joined);
  EXPECT_EQ(p.blocks().n_used(), 0);
  EXPECT_EQ(d.blocks().n_used(), 0);
  EXPECT_EQ(p.n_leases(), 0u);
  EXPECT_EQ(p.metrics().kv_leases_released_total, prompts.size());
  EXPECT_EQ(d.metrics().kv_remote_loads_total[0], prompts.size());
  EXPECT_TRUE(p.blocks().validate().empty()) << p.blocks().validate();
  EXPECT_TRUE(d.blocks().validate().empty()) << d.blocks().validate();
}

// The hand-off moves the stored bytes as they are, in every dtype: the decode side reads
// exactly what the prefill side wrote.
TEST(PdEngine, EveryKvDtypeHandsOffAsUnified) {
  ThreadPool pool(2);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GenerateParams> params;
  for (int i = 0; i < 6; ++i) {
    prompts.push_back(prompt_of(5 + 41 * i, 700 + uint32_t(i)));
    params.push_back(greedy(12));
  }
  const int64_t f32_row = fx().model->config().kv_row_format(KvDtype::f32).bytes();
  for (const KvDtype dtype : {KvDtype::f32, KvDtype::f16, KvDtype::bf16, KvDtype::fp8_e4m3, KvDtype::q8_0}) {
    SCOPED_TRACE(kv_dtype_name(dtype));
    EngineCore p(*fx().model, *fx().tok, config(512, dtype), pool);
    EngineCore d(*fx().model, *fx().tok, config(512, dtype), pool);
    EXPECT_EQ(disagg::kv_geometry(p.kv()).dtype, kv_dtype_name(dtype));
    EXPECT_LE(disagg::kv_geometry(p.kv()).row_bytes * (dtype == KvDtype::f32 ? 1 : 2), f32_row);
    const Disaggregated got = disaggregated(p, d, prompts, params);
    expect_same(unified(prompts, params, pool, dtype), got.joined);
    EXPECT_EQ(p.blocks().n_used(), 0);
    EXPECT_EQ(d.blocks().n_used(), 0);
    EXPECT_EQ(p.n_leases(), 0u);
  }
}

// A decode side that stores another dtype cannot take the blocks: the reads are refused,
// naming both dtypes, before any byte moves.
TEST(PdEngine, BlocksOfAnotherKvDtypeAreRefused) {
  ThreadPool pool(1);
  EngineCore p(*fx().model, *fx().tok, config(8, KvDtype::f32), pool);
  EngineCore d(*fx().model, *fx().tok, config(8, KvDtype::bf16), pool);
  try {
    (void)disagg::kv_block_reads(disagg::kv_geometry(p.kv()), {0}, disagg::kv_geometry(d.kv()), {0}, 0, 1);
    FAIL() << "reads across dtypes were planned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dtype f32 there, bf16 here"), std::string::npos) << e.what();
  }
}

// A fixed draft length: the adaptive one also follows how many sequences decode together,
// which differs between a unified engine and a decode instance fed by hand-offs.
SpeculativeConfig mtp(int32_t k) {
  SpeculativeConfig c;
  c.method = SpeculativeConfig::Method::kMtp;
  c.num_speculative_tokens = k;
  c.adaptive = false;
  return c;
}

// Every non-empty proposal the engine's drafter makes: (request, tokens it continues, drafts).
struct RecordingDrafter : DraftSource {
  RecordingDrafter(std::unique_ptr<DraftSource> inner, std::vector<std::tuple<int64_t, size_t, std::vector<int32_t>>>& log)
      : inner(std::move(inner)), log(log) {}
  std::vector<int32_t> propose(int64_t id, const std::vector<int32_t>& tokens, int32_t max_k) override {
    std::vector<int32_t> d = inner->propose(id, tokens, max_k);
    if (!d.empty()) log.emplace_back(id, tokens.size(), d);
    return d;
  }
  std::unique_ptr<DraftSource> inner;
  std::vector<std::tuple<int64_t, size_t, std::vector<int32_t>>>& log;
};

using DraftLog = std::vector<std::tuple<int64_t, size_t, std::vector<int32_t>>>;

void record_drafts(EngineCore& core, DraftLog& log) {
  core.wrap_drafter([&log](std::unique_ptr<DraftSource> inner) { return std::make_unique<RecordingDrafter>(std::move(inner), log); });
}

// The drafts depend on every MTP row of the prompt: the decode side proposes exactly what
// a unified engine does, from its very first step (the drafts P made after the first
// token), only if the rows and the drafts crossed with the hand-off.
TEST(PdEngine, MtpDraftsOnTheDecodeSideEqualUnified) {
  ThreadPool pool(2);
  Model& m = *fx().with_mtp;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GenerateParams> params;
  for (int i = 0; i < 5; ++i) {
    prompts.push_back(prompt_of(9 + 37 * i, 900 + uint32_t(i)));
    params.push_back(greedy(12));
  }
  for (int32_t k : {1, 3}) {
    EngineConfig c = config(512);
    c.speculative = mtp(k);
    DraftLog want, got;
    EngineCore u(m, *fx().tok, c, pool);
    record_drafts(u, want);
    Collector uc;
    for (size_t i = 0; i < prompts.size(); ++i) u.add(int64_t(i), prompts[i], params[i], uc.sink());
    run(u);
    EngineCore p(m, *fx().tok, c, pool);
    EngineCore d(m, *fx().tok, c, pool);
    record_drafts(d, got);
    const Disaggregated pd = disaggregated(p, d, prompts, params);
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(pd.joined[i].tokens, uc.results.at(int64_t(i)).tokens) << "k " << k;
    const auto by_request = [](DraftLog log) {
      std::stable_sort(log.begin(), log.end(), [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
      return log;
    };
    EXPECT_EQ(by_request(got), by_request(want)) << "k " << k;
    // Each request's first decode step verified P's drafts.
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_TRUE(std::count_if(got.begin(), got.end(), [&](const auto& e) {
        return std::get<0>(e) == int64_t(i) && std::get<1>(e) == prompts[i].size() + 1;
      }) == 1) << "request " << i << ", k " << k;
    }
    EXPECT_EQ(p.blocks().n_used(), 0);
    EXPECT_EQ(d.blocks().n_used(), 0);
  }
}

// A decode side that drafts with the MTP layer needs the layer's rows: a pool without them
// is refused, saying what to do; a pool with them hands off to a decode side without the
// layer (its own layers are copied), with the same output.
TEST(PdEngine, TheMtpLayersRowsGoWhereTheyAreKept) {
  ThreadPool pool(2);
  Model& m = *fx().with_mtp;
  EngineConfig with = config(64), without = config(64);
  with.speculative = mtp(1);
  EngineCore pw(m, *fx().tok, with, pool), po(m, *fx().tok, without, pool);
  try {
    (void)disagg::kv_block_reads(disagg::kv_geometry(po.kv()), {0}, disagg::kv_geometry(pw.kv()), {0}, 0, 1);
    FAIL() << "reads without the MTP layer's rows were planned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MTP layer rows for 0 layers there, 1 here"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--speculative-config"), std::string::npos) << e.what();
  }
  std::vector<std::vector<int32_t>> prompts{prompt_of(40, 5), prompt_of(70, 6)};
  std::vector<GenerateParams> params{greedy(8), greedy(8)};
  EngineCore u(m, *fx().tok, without, pool);
  Collector uc;
  for (size_t i = 0; i < prompts.size(); ++i) u.add(int64_t(i), prompts[i], params[i], uc.sink());
  run(u);
  const Disaggregated pd = disaggregated(pw, po, prompts, params);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(pd.joined[i].tokens, uc.results.at(int64_t(i)).tokens);
  EXPECT_EQ(pw.blocks().n_used(), 0);
  EXPECT_EQ(po.blocks().n_used(), 0);
}

TEST(PdEngine, SeededSamplingContinuesTheSameRandomStream) {
  ThreadPool pool(2);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GenerateParams> params;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(prompt_of(20 + 30 * i, 300 + uint32_t(i)));
    GenerateParams g = greedy(12);
    g.sampling.temperature = 0.9f;
    g.sampling.top_p = 0.95f;
    g.sampling.presence_penalty = 0.5f;
    g.sampling.seed = 1234 + uint64_t(i);
    params.push_back(g);
  }
  EngineCore p(*fx().model, *fx().tok, config(256), pool);
  EngineCore d(*fx().model, *fx().tok, config(256), pool);
  expect_same(unified(prompts, params, pool), disaggregated(p, d, prompts, params).joined);
}

TEST(PdEngine, PrefixCacheHitsOnTheDecodeSideAreNotPulledAndChangeNothing) {
  ThreadPool pool(2);
  const std::vector<int32_t> shared = prompt_of(64, 7);
  std::vector<std::vector<int32_t>> first{shared}, second;
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> q = shared;
    const std::vector<int32_t> tail = prompt_of(10 + 7 * i, 900 + uint32_t(i));
    q.insert(q.end(), tail.begin(), tail.end());
    second.push_back(q);
  }
  EngineCore p(*fx().model, *fx().tok, config(256), pool);
  EngineCore d(*fx().model, *fx().tok, config(256), pool);
  (void)disaggregated(p, d, first, {greedy(4)});
  const std::vector<GenerateParams> params(second.size(), greedy(8));
  const Disaggregated got = disaggregated(p, d, second, params);
  for (int64_t n : got.n_cached_on_d) EXPECT_EQ(n, 64);  // the 4 blocks of the shared prefix
  for (const Result& r : got.joined) EXPECT_EQ(r.last().n_cached_tokens, 64);  // D's own hits, as usage reports them
  expect_same(unified(second, params, pool), got.joined);
  EXPECT_EQ(d.blocks().n_used(), 0);
}

TEST(PdEngine, AFailedLoadIsRecomputedWithTheSameOutput) {
  ThreadPool pool(2);
  std::vector<std::vector<int32_t>> prompts{prompt_of(40, 11), prompt_of(77, 12)};
  std::vector<GenerateParams> params{greedy(9), greedy(9)};
  params[1].sampling.temperature = 0.7f;
  params[1].sampling.seed = 99;
  EngineCore p(*fx().model, *fx().tok, config(256), pool);
  EngineCore d(*fx().model, *fx().tok, config(256), pool);
  expect_same(unified(prompts, params, pool), disaggregated(p, d, prompts, params, /*ok_load=*/false).joined);
  EXPECT_EQ(d.metrics().kv_remote_loads_total[1], prompts.size());
  EXPECT_EQ(d.blocks().n_used(), 0);
}

TEST(PdEngine, AStopStringAcrossTheHandOffEndsTheTextAsUnifiedDoes) {
  ThreadPool pool(2);
  const std::vector<int32_t> prompt = prompt_of(30, 21);
  const std::vector<Result> plain = unified({prompt}, {greedy(6)}, pool);
  // Per-token text of the first two tokens, then a stop string made of the end of the
  // first and the start of the second.
  const std::vector<int32_t> first(plain[0].tokens.begin(), plain[0].tokens.begin() + 1);
  const std::vector<int32_t> first_two(plain[0].tokens.begin(), plain[0].tokens.begin() + 2);
  const std::string t0 = fx().tok->decode(first, true), t01 = fx().tok->decode(first_two, true);
  ASSERT_GT(t0.size(), 0u);
  ASSERT_GT(t01.size(), t0.size());
  GenerateParams g = greedy(6);
  g.stop = {t01.substr(t0.size() - 1, 2)};
  EngineCore p(*fx().model, *fx().tok, config(64), pool);
  EngineCore d(*fx().model, *fx().tok, config(64), pool);
  const std::vector<Result> want = unified({prompt}, {g}, pool);
  ASSERT_EQ(want[0].last().finish, FinishKind::kStop);
  expect_same(want, disaggregated(p, d, {prompt}, {g}).joined);
}

TEST(PdEngine, AFirstTokenThatStopsEndsOnThePrefillSideWithoutALease) {
  ThreadPool pool(2);
  const std::vector<int32_t> prompt = prompt_of(33, 5);
  const std::vector<Result> plain = unified({prompt}, {greedy(3)}, pool);
  GenerateParams g = greedy(5);
  g.stop_token_ids = {plain[0].tokens[0]};
  g.remote_decode = true;
  EngineCore p(*fx().model, *fx().tok, config(64), pool);
  Collector c;
  p.add(1, prompt, g, c.sink());
  run(p);
  const Result& r = c.results.at(1);
  ASSERT_TRUE(r.finished());
  EXPECT_EQ(r.last().finish, FinishKind::kStop);
  EXPECT_FALSE(r.last().kv.has_value());
  EXPECT_EQ(p.n_leases(), 0u);
  EXPECT_EQ(p.blocks().n_used(), 0);
  EXPECT_EQ(p.release_lease(1), LeaseRelease::kUnknown);
}

TEST(PdEngine, LeasesExpireAndALateReleaseHearsSo) {
  ThreadPool pool(2);
  EngineConfig cfg = config(64);
  cfg.kv_lease = std::chrono::milliseconds(50);
  EngineCore p(*fx().model, *fx().tok, cfg, pool);
  Collector c;
  GenerateParams g = greedy(5);
  g.remote_decode = true;
  p.add(1, prompt_of(40, 1), g, c.sink());
  p.add(2, prompt_of(40, 2), g, c.sink());
  run(p);
  ASSERT_TRUE(c.results.at(1).last().kv.has_value());
  EXPECT_EQ(p.n_leases(), 2u);
  EXPECT_EQ(p.blocks().n_used(), 6);  // 3 blocks of 16 positions each
  ASSERT_TRUE(p.next_lease_expiry().has_value());
  EXPECT_LE(*p.next_lease_expiry(), Clock::now() + std::chrono::milliseconds(50));
  p.end_leases(*p.next_lease_expiry() - std::chrono::milliseconds(1));
  EXPECT_EQ(p.n_leases(), 2u);
  p.end_leases(Clock::now() + std::chrono::milliseconds(100));
  EXPECT_EQ(p.n_leases(), 0u);
  EXPECT_EQ(p.blocks().n_used(), 0);
  EXPECT_EQ(p.release_lease(1), LeaseRelease::kExpired);
  EXPECT_EQ(p.release_lease(3), LeaseRelease::kUnknown);
  EXPECT_EQ(p.metrics().kv_leases_expired_total, 2u);
}

TEST(PdEngine, AbortingARequestWaitingForItsKvFreesItsBlocks) {
  ThreadPool pool(2);
  EngineCore d(*fx().model, *fx().tok, config(64), pool);
  Collector c;
  d.add_remote(1, prompt_of(50, 3), 17, greedy(5), c.sink());
  run(d);
  ASSERT_TRUE(c.results.at(1).outputs.at(0).kv.has_value());
  EXPECT_EQ(d.blocks().n_used(), 4);
  d.abort(1);
  EXPECT_EQ(d.blocks().n_used(), 0);
  EXPECT_EQ(c.results.at(1).last().finish, FinishKind::kAbort);
  d.kv_loaded(1, true);  // too late: ignored
  EXPECT_FALSE(d.has_work());
}

TEST(PdEngine, DecodeRequestsNeedSomethingLeftToGenerate) {
  ThreadPool pool(2);
  EngineCore d(*fx().model, *fx().tok, config(64), pool);
  Collector c;
  EXPECT_THROW(d.add_remote(1, prompt_of(10, 3), 17, greedy(1), c.sink()), RequestError);
  EXPECT_THROW(d.add_remote(1, prompt_of(10, 3), 1 << 30, greedy(4), c.sink()), RequestError);
}

}  // namespace
}  // namespace moe
