#pragma once
// The engine's figures for /metrics: latency histograms, token and request counters, and
// gauges of the queue and the KV cache. Names and buckets follow vLLM's Prometheus metrics,
// so dashboards built for vLLM read them (with the moengine: prefix).
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/request.h"

namespace moe {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);

  const std::vector<double>& bounds() const { return bounds_; }
  // Observations <= bounds()[i] (cumulative, as Prometheus buckets are); the +Inf bucket
  // is count().
  uint64_t cumulative(size_t i) const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last one is +Inf
  uint64_t count_ = 0;
  double sum_ = 0.0;
};

struct EngineMetrics {
  EngineMetrics();

  // Seconds from arrival to the first output token.
  Histogram time_to_first_token;
  // Seconds between consecutive output tokens of a request.
  Histogram time_per_output_token;
  // Seconds from arrival to the final output.
  Histogram e2e_request_latency;
  // Seconds from arrival to the step that first schedules the request.
  Histogram request_queue_time;

  uint64_t prompt_tokens_total = 0;      // prompt tokens of requests that started running
  uint64_t generation_tokens_total = 0;  // tokens generated
  uint64_t prefix_cache_queries = 0;     // prompt tokens looked up in the prefix cache
  uint64_t prefix_cache_hits = 0;        // of which were found
  uint64_t num_preemptions_total = 0;
  // Finished requests by FinishKind (index = int(kind)).
  std::array<uint64_t, 5> request_success_total{};
  // Prefill/decode: leases on handed-off prompts' blocks that were released by their
  // decode instance, and that ran out (a release that came too late counts in both).
  uint64_t kv_leases_released_total = 0;
  uint64_t kv_leases_expired_total = 0;
  // Remote-KV requests whose KV was loaded [0] or had to be recomputed [1].
  std::array<uint64_t, 2> kv_remote_loads_total{};

  // Gauges, as of the end of the last step.
  int64_t num_requests_running = 0;
  int64_t num_requests_waiting = 0;
  double kv_cache_usage_perc = 0.0;  // fraction in [0, 1] of blocks held by requests
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;
  int64_t kv_leases_active = 0;
};

// Writes metrics in the Prometheus text exposition format (version 0.0.4), every name
// prefixed with "moengine:" and labelled with model_name.
class PrometheusText {
 public:
  explicit PrometheusText(const std::string& model_name);

  void gauge(const char* name, const char* help, double v) { scalar(name, help, "gauge", v); }
  void counter(const char* name, const char* help, double v) { scalar(name, help, "counter", v); }
  void histogram(const char* name, const char* help, const Histogram& h);
  // One counter with one more label, a sample per (label value, count).
  void labelled_counter(const char* name, const char* help, const char* label,
                        const std::vector<std::pair<std::string, double>>& values);

  std::string take() { return std::move(out_); }

 private:
  void head(const char* name, const char* help, const char* type);
  void scalar(const char* name, const char* help, const char* type, double v);

  std::string labels_;
  std::string out_;
};

// Prometheus text exposition (version 0.0.4) of the metrics, every name prefixed with
// "moengine:" and labelled with model_name.
std::string prometheus_text(const EngineMetrics& m, const std::string& model_name);

}  // namespace moe
