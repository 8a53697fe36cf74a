#pragma once
// The benchmark's summary as the table `vllm bench serve` prints and as JSON with vLLM's
// key names (mean_ttft_ms, p99_itl_ms, output_throughput, ...), so scripts written for
// one read the other.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loadgen/stats.h"

namespace moe::loadgen {

struct RunInfo {
  std::string base_url, endpoint, model, dataset;
  size_t num_prompts = 0;
  double request_rate = 0;  // infinity for "all at once"
  double burstiness = 1;
  size_t max_concurrency = 0;  // 0: no limit
  std::vector<double> percentiles;
};

std::string format_table(const Summary& s, const RunInfo& info);

// With per_request, also the lists vLLM's --save-detailed writes: input_lens,
// output_lens, start_times, ttfts, itls, e2els (seconds), generated_texts, errors.
nlohmann::ordered_json to_json(const Summary& s, const RunInfo& info, const std::vector<RequestResult>& results,
                               bool per_request);

// "99" for 99, "99.9" for 99.9: how a percentile appears in labels and keys.
std::string percentile_name(double p);

}  // namespace moe::loadgen
