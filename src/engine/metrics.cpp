#include "engine/metrics.h"

namespace moe {

// vLLM's buckets, so the same dashboards and alert thresholds apply.
EngineMetrics::EngineMetrics()
    : time_to_first_token({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                           10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}),
      time_per_output_token({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                             10.0, 20.0, 40.0, 80.0}),
      e2e_request_latency({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                           240.0, 480.0, 960.0, 1920.0, 7680.0}),
      request_queue_time(e2e_request_latency.bounds()) {}

std::string prometheus_text(const EngineMetrics& m, const std::string& model_name) {
  PrometheusText w(model_name);
  w.gauge("num_requests_running", "Requests in the running batch.", double(m.num_requests_running));
  w.gauge("num_requests_waiting", "Requests waiting to be scheduled.", double(m.num_requests_waiting));
  w.gauge("kv_cache_usage_perc", "Fraction of KV cache blocks held by requests (1 = full).", m.kv_cache_usage_perc);
  w.gauge("num_kv_blocks_total", "KV cache blocks.", double(m.kv_blocks_total));
  w.gauge("num_kv_blocks_used", "KV cache blocks held by requests.", double(m.kv_blocks_used));
  w.gauge("num_kv_tokens_total", "Positions the KV cache holds.", double(m.kv_blocks_total * m.kv_block_size));
  w.samples("cache_config_info", "How the KV cache is laid out (as vLLM's cache_config_info).", "gauge",
            {{{{"block_size", std::to_string(m.kv_block_size)},
               {"cache_dtype", m.kv_cache_dtype},
               {"bytes_per_token", std::to_string(m.kv_bytes_per_token)}},
              1.0}});
  if (m.expert_parallel) {
    w.counter("ep_expert_tokens_total", "Token-expert pairs this rank's experts computed, for any rank's requests.",
              double(m.ep_expert_tokens_total));
    w.gauge("ep_load_imbalance", "Pairs computed by the group's busiest rank over the mean rank's, recent window (0: none yet).",
            m.ep_load_imbalance);
    w.counter("ep_replacements_total", "Live expert re-placements switched in.", double(m.ep_replacements_total));
    w.counter("ep_expert_bytes_moved_total", "Bytes of expert weights this rank sent or received for re-placements.",
              double(m.ep_expert_bytes_moved_total));
  }
  w.counter("prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", double(m.prefix_cache_queries));
  w.counter("prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", double(m.prefix_cache_hits));
  w.counter("prompt_tokens_total", "Prompt tokens of requests that started running.", double(m.prompt_tokens_total));
  w.counter("generation_tokens_total", "Tokens generated.", double(m.generation_tokens_total));
  w.counter("num_preemptions_total", "Requests preempted (recomputed later) for lack of KV blocks.",
            double(m.num_preemptions_total));
  if (m.num_speculative_tokens > 0) {
    w.counter("spec_decode_num_drafts_total", "Decode steps of a request that verified drafted tokens.",
              double(m.spec_decode_num_drafts));
    w.counter("spec_decode_num_draft_tokens_total", "Drafted tokens verified.", double(m.spec_decode_num_draft_tokens));
    w.counter("spec_decode_num_accepted_tokens_total", "Drafted tokens accepted.", double(m.spec_decode_num_accepted_tokens));
    std::vector<std::pair<std::string, double>> per_pos;
    for (int32_t i = 0; i < m.num_speculative_tokens; ++i) {
      const size_t k = size_t(i);
      per_pos.emplace_back(std::to_string(i), double(k < m.spec_decode_accepted_per_pos.size() ? m.spec_decode_accepted_per_pos[k] : 0));
    }
    w.labelled_counter("spec_decode_num_accepted_tokens_per_pos_total", "Drafted tokens accepted, by position in the draft.",
                       "position", per_pos);
  }
  std::vector<std::pair<std::string, double>> finished;
  for (FinishKind k : {FinishKind::kStop, FinishKind::kLength, FinishKind::kAbort, FinishKind::kError}) {
    finished.emplace_back(finish_kind_name(k), double(m.request_success_total[size_t(k)]));
  }
  w.labelled_counter("request_success_total", "Finished requests by finish reason.", "finished_reason", finished);
  w.gauge("kv_leases_active", "Handed-off prompts whose KV blocks are held for a decode instance.", double(m.kv_leases_active));
  w.counter("kv_leases_released_total", "KV leases released by their decode instance.", double(m.kv_leases_released_total));
  w.counter("kv_leases_expired_total", "KV leases that ran out before their decode instance released them.",
            double(m.kv_leases_expired_total));
  w.labelled_counter("kv_remote_loads_total", "Decode requests whose prompt KV was pulled (loaded) or recomputed.", "result",
                     {{"loaded", double(m.kv_remote_loads_total[0])}, {"recomputed", double(m.kv_remote_loads_total[1])}});
  w.histogram("time_to_first_token_seconds", "Seconds from arrival to the first token.", m.time_to_first_token);
  w.histogram("time_per_output_token_seconds", "Seconds between consecutive output tokens.", m.time_per_output_token);
  w.histogram("e2e_request_latency_seconds", "Seconds from arrival to the last output.", m.e2e_request_latency);
  w.histogram("request_queue_time_seconds", "Seconds from arrival to first being scheduled.", m.request_queue_time);
  return w.take();
}

}  // namespace moe
