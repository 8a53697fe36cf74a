// Histograms and the Prometheus text the server exposes at /metrics.
#include <gtest/gtest.h>

#include "engine/metrics.h"

namespace moe {
namespace {

TEST(Histogram, BucketsAreCumulativeWithInclusiveUpperBounds) {
  Histogram h({0.1, 1.0, 10.0});
  for (double v : {0.05, 0.1, 0.5, 1.0, 3.0, 20.0}) h.observe(v);
  EXPECT_EQ(h.cumulative(0), 2u);
  EXPECT_EQ(h.cumulative(1), 4u);
  EXPECT_EQ(h.cumulative(2), 5u);
  EXPECT_EQ(h.count(), 6u);
  EXPECT_DOUBLE_EQ(h.sum(), 24.65);
}

TEST(PrometheusText, HasVllmNamesWithTheModelLabel) {
  EngineMetrics m;
  m.num_requests_running = 3;
  m.kv_cache_usage_perc = 0.25;
  m.prefix_cache_queries = 64;
  m.prefix_cache_hits = 32;
  m.request_success_total[size_t(FinishKind::kLength)] = 7;
  m.time_to_first_token.observe(0.003);
  const std::string text = prometheus_text(m, "tiny \"q8\"");
  const std::string label = "model_name=\"tiny \\\"q8\\\"\"";
  for (const std::string& line : std::vector<std::string>{
           "# TYPE moengine:num_requests_running gauge",
           "moengine:num_requests_running{" + label + "} 3",
           "moengine:num_requests_waiting{" + label + "} 0",
           "moengine:kv_cache_usage_perc{" + label + "} 0.25",
           "# TYPE moengine:prefix_cache_queries_total counter",
           "moengine:prefix_cache_queries_total{" + label + "} 64",
           "moengine:prefix_cache_hits_total{" + label + "} 32",
           "moengine:request_success_total{" + label + ",finished_reason=\"length\"} 7",
           "# TYPE moengine:time_to_first_token_seconds histogram",
           "moengine:time_to_first_token_seconds_bucket{" + label + ",le=\"0.001\"} 0",
           "moengine:time_to_first_token_seconds_bucket{" + label + ",le=\"0.005\"} 1",
           "moengine:time_to_first_token_seconds_bucket{" + label + ",le=\"+Inf\"} 1",
           "moengine:time_to_first_token_seconds_count{" + label + "} 1",
           "moengine:time_per_output_token_seconds_count{" + label + "} 0",
           "moengine:e2e_request_latency_seconds_count{" + label + "} 0",
           "moengine:request_queue_time_seconds_count{" + label + "} 0",
           "moengine:prompt_tokens_total{" + label + "} 0",
           "moengine:generation_tokens_total{" + label + "} 0",
       }) {
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << line << "\nnot in:\n" << text;
  }
}

}  // namespace
}  // namespace moe
