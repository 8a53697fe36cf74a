// The engine on its own thread: concurrent submitters, cancellation from other threads,
// the bounded waiting queue, and shutdown with requests still running.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "engine/async_engine.h"
#include "tokenizer/gguf_vocab.h"
#include "test_models.h"

namespace moe {
namespace {

struct Fixture {
  Fixture() {
    GenSpec spec = gen_preset(Arch::Deepseek2, "tiny");
    spec.type = GgmlType::Q8_0;
    path = testing::write_model(spec, "async_engine_tiny_q8_0");
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

AsyncEngineConfig config(int32_t max_seqs, size_t max_waiting) {
  AsyncEngineConfig c;
  c.engine.n_blocks = 128;
  c.engine.scheduler.max_num_batched_tokens = 256;
  c.engine.scheduler.max_num_seqs = max_seqs;
  c.threads = 1;
  c.max_waiting = max_waiting;
  return c;
}

GenerateParams greedy(int64_t max_tokens) {
  GenerateParams p;
  p.sampling.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// One request's outputs, filled on the engine thread and awaited on the test's.
struct Awaited {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> tokens;
  std::optional<RequestOutput> final;

  OutputSink sink() {
    return [this](RequestOutput&& o) {
      std::lock_guard lk(mu);
      for (const TokenOutput& t : o.tokens) tokens.push_back(t.token);
      if (o.finished) final = std::move(o);
      cv.notify_all();
    };
  }
  const RequestOutput& wait() {
    std::unique_lock lk(mu);
    EXPECT_TRUE(cv.wait_for(lk, std::chrono::seconds(120), [&] { return final.has_value(); })) << "no final output";
    return *final;
  }
  size_t n_tokens() {
    std::lock_guard lk(mu);
    return tokens.size();
  }
};

std::vector<int32_t> prompt_of(int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(int32_t((i * 37 + salt * 11) % 400));
  return p;
}

// Metrics are published after the step whose outputs the sinks already received.
EngineMetrics settled_metrics(const AsyncEngine& engine) {
  for (int i = 0; i < 1000; ++i) {
    const EngineMetrics m = engine.metrics();
    if (m.num_requests_running == 0 && m.num_requests_waiting == 0 && m.kv_blocks_used == 0) return m;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return engine.metrics();
}

TEST(AsyncEngine, ConcurrentSubmittersAllGetTheirOwnOutput) {
  const int n = 16;
  std::vector<std::vector<int32_t>> alone(n);
  {
    AsyncEngine engine(*fx().model, *fx().tok, config(1, 64));
    for (int i = 0; i < n; ++i) {
      Awaited a;
      ASSERT_TRUE(engine.submit(prompt_of(8 + i, i), greedy(10), a.sink()).has_value());
      EXPECT_EQ(a.wait().finish, FinishKind::kLength);
      alone[size_t(i)] = a.tokens;
    }
  }
  AsyncEngine engine(*fx().model, *fx().tok, config(16, 64));
  std::vector<Awaited> results(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] { ASSERT_TRUE(engine.submit(prompt_of(8 + i, i), greedy(10), results[size_t(i)].sink())); });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(results[size_t(i)].wait().n_output_tokens, 10);
    EXPECT_EQ(results[size_t(i)].tokens, alone[size_t(i)]) << "request " << i;
  }
  const EngineMetrics m = settled_metrics(engine);
  EXPECT_EQ(m.generation_tokens_total, uint64_t(n) * 10);
  EXPECT_EQ(m.kv_blocks_used, 0);
}

TEST(AsyncEngine, FullWaitingQueueIsRefusedAndCancelFreesBlocks) {
  AsyncEngine engine(*fx().model, *fx().tok, config(1, 1));
  Awaited running, waiting;
  const auto a = engine.submit(prompt_of(20, 1), greedy(1000), running.sink());
  ASSERT_TRUE(a.has_value());
  // Once the first request produces tokens it is running, and the queue is empty again.
  for (int i = 0; i < 12000 && running.n_tokens() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GT(running.n_tokens(), 0u);
  const auto b = engine.submit(prompt_of(20, 2), greedy(5), waiting.sink());
  ASSERT_TRUE(b.has_value());
  Awaited refused;
  EXPECT_FALSE(engine.submit(prompt_of(20, 3), greedy(5), refused.sink()).has_value());

  engine.cancel(*a);
  EXPECT_EQ(running.wait().finish, FinishKind::kAbort);
  EXPECT_EQ(waiting.wait().finish, FinishKind::kLength);
  const EngineMetrics m = settled_metrics(engine);
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.num_requests_running, 0);
  EXPECT_EQ(m.request_success_total[size_t(FinishKind::kAbort)], 1u);
}

TEST(AsyncEngine, InvalidRequestThrowsAndShutdownAbortsTheRest) {
  Awaited a;
  {
    AsyncEngine engine(*fx().model, *fx().tok, config(4, 8));
    EXPECT_THROW((void)engine.submit({}, greedy(4), [](RequestOutput&&) {}), RequestError);
    ASSERT_TRUE(engine.submit(prompt_of(10, 4), greedy(1500), a.sink()).has_value());
  }
  EXPECT_EQ(a.wait().finish, FinishKind::kAbort);
}

}  // namespace
}  // namespace moe
