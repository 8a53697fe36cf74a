#pragma once
// The engine's figures for /metrics: latency histograms, token and request counters, and
// gauges of the queue and the KV cache. Names and buckets follow vLLM's Prometheus metrics,
// so dashboards built for vLLM read them (with the moengine: prefix).
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/prometheus.h"
#include "engine/request.h"

namespace moe {

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

  // Speculative decoding (as vLLM names them): decode steps of a request that verified
  // drafts, the drafted tokens, the accepted ones, and the accepted ones by position in
  // the draft (index 0: the first drafted token). Reported when num_speculative_tokens > 0.
  int32_t num_speculative_tokens = 0;
  uint64_t spec_decode_num_drafts = 0;
  uint64_t spec_decode_num_draft_tokens = 0;
  uint64_t spec_decode_num_accepted_tokens = 0;
  std::vector<uint64_t> spec_decode_accepted_per_pos;

  // Gauges, as of the end of the last step.
  int64_t num_requests_running = 0;
  int64_t num_requests_waiting = 0;
  double kv_cache_usage_perc = 0.0;  // fraction in [0, 1] of blocks held by requests
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;
  int64_t kv_block_size = 0;         // positions per block
  const char* kv_cache_dtype = "";   // how the cache stores its rows (kernels/kv_format.h)
  int64_t kv_bytes_per_token = 0;    // every layer's row of one position
  int64_t kv_leases_active = 0;

  // Expert parallelism, when the model runs in a group: token-expert pairs this rank's
  // experts computed (for any rank's requests), and the group's busiest rank over the mean
  // rank, over the recorded window of steps.
  bool expert_parallel = false;
  uint64_t ep_expert_tokens_total = 0;
  double ep_load_imbalance = 0.0;
  uint64_t ep_replacements_total = 0;        // live re-placements switched in
  uint64_t ep_expert_bytes_moved_total = 0;  // expert weights this rank copied for them
};

// Prometheus text exposition (version 0.0.4) of the metrics, every name prefixed with
// "moengine:" and labelled with model_name.
std::string prometheus_text(const EngineMetrics& m, const std::string& model_name);

}  // namespace moe
