// The event loop on cases worked out by hand, and conservation: every request ends exactly
// once and every KV block and token goes back.
#include <gtest/gtest.h>

#include <cmath>

#include "sim/results.h"
#include "sim/simulator.h"
#include "sim_files.h"

namespace moe::sim {
namespace {

using testing::kToyHardware;
using testing::kToyModel;
using testing::write_config;

SimConfig unified_one(int64_t prompt, int64_t output, int32_t requests) {
  const std::string text = std::string(kToyHardware) + kToyModel + R"(
deployment:
  unified: {instances: 1, devices: 1, max_batched_tokens: 512, max_sequences_per_device: 8, block_size: 16}
workload:
  arrival: {closed: 1}
)" + "  prompt_tokens: {fixed: " + std::to_string(prompt) + "}\n  output_tokens: {fixed: " +
                           std::to_string(output) + "}\n  requests: " + std::to_string(requests) + "\n";
  return read_config(write_config("unified_one.yaml", text), {});
}

// The toy model's step of `n` new tokens after `context` cached ones, worked out from the
// formulas of docs/simulator.md with every efficiency 1 (seconds).
double toy_step(double n, double context) {
  const double peak = 1e12, bw = 1e11, H = 256, layers = 4;
  const double attn_params = H * 4 * 64 + 2 * H * 2 * 64 + 4 * 64 * H;  // q, k and v, o
  const double expert = 3 * H * 512, router = H * 8;
  const double pairs = n * context + n * (n + 1) / 2;
  const double attention = std::max(pairs * 4 * 4 * 64 / peak, (context + n) * 2 * 2 * 64 * 2 / bw);
  const double projections = std::max(2 * n * attn_params / peak, attn_params * 2 / bw);
  const double routing = std::max(2 * n * router / peak, router * 2 / bw);
  const double touched = 8 * (1 - std::pow(1 - 2.0 / 8, n));  // experts visited by n tokens
  const double experts = std::max(n * 2 * 2 * expert / peak, touched * expert * 2 / bw);
  const double lm_head = std::max(2 * 1000 * H / peak, 1000 * H * 2 / bw);
  return layers * (attention + projections + routing + experts) + lm_head;
}

TEST(SimEventLoop, OneRequestOneInstanceExactTimes) {
  const SimConfig c = unified_one(100, 10, 1);
  const SimResult r = simulate(c);
  ASSERT_EQ(r.requests.size(), 1u);
  const SimRequest& q = r.requests[0];
  const double ttft = toy_step(100, 0);
  EXPECT_NEAR(q.first_token_s, ttft, 1e-15);
  // Nine decode steps, at contexts 100 .. 108.
  double end = ttft;
  for (int i = 0; i < 9; ++i) end += toy_step(1, 100 + i);
  EXPECT_NEAR(q.finish_s, end, 1e-15);
  EXPECT_EQ(r.pools[0].steps, 10);
  EXPECT_NEAR(r.end_s, end, 1e-15);
}

TEST(SimEventLoop, ClosedLoopSendsTheNextRequestWhenOneEnds) {
  const SimConfig c = unified_one(100, 10, 3);
  const SimResult r = simulate(c);
  ASSERT_EQ(r.requests.size(), 3u);
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_DOUBLE_EQ(r.requests[i].spec.arrival_s, r.requests[i - 1].finish_s);
    EXPECT_NEAR(r.requests[i].finish_s - r.requests[i].spec.arrival_s, r.requests[0].finish_s, 1e-12);
  }
  const Summary s = summarize(c, r);
  EXPECT_EQ(s.completed, 3);
  // Output throughput as bench serve counts it: all output tokens over the run.
  EXPECT_NEAR(to_json(c, r, s)["unified"]["output_tokens_per_s"].get<double>(), 30 / r.end_s, 1e-6);
}

TEST(SimEventLoop, ClosedLoopClientsPauseTheirThinkTimeBetweenRequests) {
  const std::string text = std::string(kToyHardware) + kToyModel + R"(
deployment:
  unified: {instances: 1, devices: 1, max_batched_tokens: 512, max_sequences_per_device: 8, block_size: 16}
workload:
  arrival: {closed: {clients: 1, think_s: 0.5}}
  prompt_tokens: {fixed: 100}
  output_tokens: {fixed: 10}
  requests: 40
)";
  const SimConfig c = read_config(write_config("think.yaml", text), {});
  const SimResult r = simulate(c);
  ASSERT_EQ(r.requests.size(), 40u);
  double pauses = 0;
  for (size_t i = 1; i < r.requests.size(); ++i) {
    const double pause = r.requests[i].spec.arrival_s - r.requests[i - 1].finish_s;
    EXPECT_GT(pause, 0);
    pauses += pause;
    // Service starts at the arrival, not when the previous answer ended.
    EXPECT_NEAR(r.requests[i].first_token_s - r.requests[i].spec.arrival_s,
                r.requests[0].first_token_s - r.requests[0].spec.arrival_s, 1e-12);
  }
  // Exponential pauses of mean 0.5 s: 39 of them average within 0.5 +- 0.25 (over 3 sigma).
  EXPECT_NEAR(pauses / 39, 0.5, 0.25);
}

TEST(SimEventLoop, ClosedLoopReplaysATracesLengthsInTheOrderItSentThem) {
  // A bench serve result file, its requests listed out of their send order.
  const std::string trace = write_config("lengths.json", R"({"start_times": [0.3, 0.1, 0.2], "input_lens": [30, 10, 20],
                                                           "output_lens": [3, 1, 2]})");
  const std::string text = std::string(kToyHardware) + kToyModel + R"(
deployment:
  unified: {instances: 1, devices: 1, max_batched_tokens: 512, max_sequences_per_device: 8, block_size: 16}
workload:
  arrival: {closed: {clients: 1, lengths_from: )" + trace + R"(}}
)";
  const SimConfig c = read_config(write_config("lengths.yaml", text), {});
  const SimResult r = simulate(c, read_request_trace(c.workload.arrival.trace_file));
  ASSERT_EQ(r.requests.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(r.requests[i].spec.prompt_tokens, int64_t(10 * (i + 1)));
    EXPECT_EQ(r.requests[i].spec.output_tokens, int64_t(i + 1));
    if (i > 0) EXPECT_DOUBLE_EQ(r.requests[i].spec.arrival_s, r.requests[i - 1].finish_s);
  }
}

// A unified toy instance serving a bench serve result file's requests (arrival times and
// lengths), on hardware that takes `wake_us` to wake.
SimResult traced_run(const std::string& name, const std::string& requests, double wake_us) {
  const std::string text = std::string(kToyHardware) + "  overhead: {wake_us: " + std::to_string(wake_us) + "}\n" + kToyModel + R"(
deployment:
  unified: {instances: 1, devices: 1, max_batched_tokens: 512, max_sequences_per_device: 8, block_size: 16}
workload:
  arrival: {trace: )" + write_config(name + ".json", requests) + "}\n";
  const SimConfig c = read_config(write_config(name + ".yaml", text), {});
  return simulate(c, read_request_trace(c.workload.arrival.trace_file));
}

TEST(SimEventLoop, AnIdleInstanceStartsItsStepAfterTheWakeTime) {
  // One request: its prefill starts 1 ms after it arrived; its decode step follows at once.
  const SimResult one = traced_run("wake-one", R"({"start_times": [0], "input_lens": [100], "output_lens": [2]})", 1000);
  ASSERT_EQ(one.requests.size(), 1u);
  EXPECT_NEAR(one.requests[0].first_token_s, 0.001 + toy_step(100, 0), 1e-12);
  EXPECT_NEAR(one.requests[0].finish_s, 0.001 + toy_step(100, 0) + toy_step(1, 100), 1e-12);

  // Two requests 0.4 ms apart: within the wake, one step takes both; without it the
  // first starts alone and the second waits for that step.
  const std::string two = R"({"start_times": [0, 0.0004], "input_lens": [100, 100], "output_lens": [2, 2]})";
  const SimResult woken = traced_run("wake-two", two, 1000);
  ASSERT_EQ(woken.requests.size(), 2u);
  EXPECT_DOUBLE_EQ(woken.requests[0].first_token_s, woken.requests[1].first_token_s);
  EXPECT_EQ(woken.pools[0].steps, 2);
  const SimResult at_once = traced_run("wake-none", two, 0);
  EXPECT_NEAR(at_once.requests[0].first_token_s, toy_step(100, 0), 1e-12);
  EXPECT_LT(at_once.requests[0].first_token_s, at_once.requests[1].first_token_s);
  EXPECT_GT(at_once.pools[0].steps, 2);
}

// A P/D deployment with a decode KV cache small enough that sequences get preempted.
SimConfig pd_under_pressure(const std::string& policy) {
  const std::string text = std::string(kToyHardware) + kToyModel + R"(
deployment:
  prefill: {instances: 2, devices: 2, max_batched_tokens: 256, max_sequences_per_device: 8, block_size: 16,
            kv_cache_gib: 0.0005}
  decode: {instances: 2, devices: 4, max_sequences_per_device: 6, kv_cache_gib: 0.0003}
  policy: )" + policy + R"(
workload:
  arrival: {poisson: 3000}
  prompt_tokens: {lognormal: {mean: 120, sigma: 0.6}}
  output_tokens: {uniform: [1, 60]}
  duration_s: 0.2
  seed: 3
slo: {ttft_s: 0.05, tpot_s: 0.001}
)";
  return read_config(write_config("pd_" + policy + ".yaml", text), {});
}

TEST(SimEventLoop, EveryRequestEndsOnceAndKvReturnsToZero) {
  for (const char* policy : {"cost", "round_robin", "least_load", "power_of_two", "cache_aware"}) {
    SCOPED_TRACE(policy);
    const SimConfig c = pd_under_pressure(policy);
    const SimResult r = simulate(c);
    ASSERT_GT(r.requests.size(), 300u);
    int64_t completed = 0, rejected = 0;
    for (const SimRequest& q : r.requests) {
      EXPECT_NE(q.rejected, q.finish_s >= 0) << "request " << q.id << " must end exactly one way";
      if (q.rejected) {
        ++rejected;
        continue;
      }
      ++completed;
      EXPECT_GE(q.first_token_s, q.spec.arrival_s);
      EXPECT_GE(q.finish_s, q.first_token_s);
      EXPECT_GE(q.prefill_view, 0);
      EXPECT_GE(q.decode_view, 0);
    }
    const Summary s = summarize(c, r);
    EXPECT_EQ(s.completed, completed);
    EXPECT_EQ(s.rejected, rejected);
    EXPECT_EQ(completed + rejected, int64_t(r.requests.size()));
    EXPECT_GT(s.preemptions, 0) << "the decode cache was meant to overflow";
    EXPECT_EQ(r.blocks_in_use_at_end, 0);
    EXPECT_EQ(r.sequences_at_end, 0);
    EXPECT_NEAR(r.decode_kv_tokens_at_end, 0, 1e-6);
    EXPECT_EQ(r.block_check, "");
    EXPECT_EQ(r.stalled, 0);
  }
}

TEST(SimEventLoop, PromptsLargerThanARankAreRejectedAtOnce) {
  const std::string text = std::string(kToyHardware) + kToyModel + R"(
deployment:
  unified: {instances: 1, devices: 1, max_sequences_per_device: 4, kv_cache_gib: 0.0001, block_size: 16}
workload:
  arrival: {closed: 2}
  prompt_tokens: {uniform: [10, 400]}
  output_tokens: {fixed: 4}
  requests: 40
)";
  const SimConfig c = read_config(write_config("reject.yaml", text), {});
  const SimResult r = simulate(c);
  int64_t rejected = 0;
  for (const SimRequest& q : r.requests) {
    const bool too_big = q.spec.prompt_tokens + q.spec.output_tokens > r.pools[0].kv_capacity_tokens_per_rank;
    EXPECT_EQ(q.rejected, too_big) << q.spec.prompt_tokens;
    rejected += q.rejected;
  }
  EXPECT_GT(rejected, 0);
  EXPECT_EQ(int64_t(r.requests.size()), 40);
  EXPECT_EQ(r.blocks_in_use_at_end, 0);
}

TEST(SimEventLoop, SameConfigSameResult) {
  const SimConfig c = pd_under_pressure("power_of_two");
  const SimResult a = simulate(c), b = simulate(c);
  ASSERT_EQ(a.requests.size(), b.requests.size());
  for (size_t i = 0; i < a.requests.size(); ++i) {
    EXPECT_EQ(a.requests[i].finish_s, b.requests[i].finish_s);
    EXPECT_EQ(a.requests[i].decode_view, b.requests[i].decode_view);
  }
}

}  // namespace
}  // namespace moe::sim
