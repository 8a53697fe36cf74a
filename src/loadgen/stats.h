#pragma once
// What one benchmark request measured, and the summary `bench serve` prints: pure
// functions of the recorded numbers, with the definitions `vllm bench serve` uses.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace moe::loadgen {

struct RequestResult {
  bool success = false;
  std::string error;           // why it failed, for the user
  int64_t prompt_tokens = 0;   // usage.prompt_tokens from the server, else the dataset's estimate
  int64_t output_tokens = 0;   // usage.completion_tokens, else the number of content chunks
  double start_s = 0;          // when the request was sent, seconds after the benchmark began
  double ttft_s = 0;           // to the first chunk that carried generated text
  double e2e_s = 0;            // to the end of the response (or to the failure)
  std::vector<double> itl_s;   // gaps between consecutive content chunks
  std::string generated_text;
  // Speculative decoding: drafted tokens the server accepted and rejected, from
  // usage.completion_tokens_details (0 when it does not say).
  int64_t accepted_draft_tokens = 0, rejected_draft_tokens = 0;
};

// (e2e - ttft) / (output_tokens - 1); 0 for a single output token, which has no decode
// phase (so it never fails a TPOT objective).
double time_per_output_token_s(const RequestResult& r);

// Service-level objectives in milliseconds; a request is "good" when it completed and
// meets every one that is set.
struct Slo {
  std::optional<double> ttft_ms, tpot_ms, e2el_ms;
  bool empty() const { return !ttft_ms && !tpot_ms && !e2el_ms; }
};

// Parses "ttft:300" "tpot:50" "e2el:2000" (e2e is accepted for e2el); throws moe::Error
// naming the bad item.
Slo parse_slo(const std::vector<std::string>& items);
bool meets(const RequestResult& r, const Slo& slo);

// p in [0, 100] of sorted values, interpolating linearly between the two nearest ranks
// (numpy's default); 0 for no values.
double percentile(std::span<const double> sorted, double p);

struct Distribution {
  size_t count = 0;
  double mean = 0, median = 0, stddev = 0;            // stddev over the population (ddof 0)
  std::vector<std::pair<double, double>> percentiles;  // (p, value)
};
Distribution describe(std::vector<double> values, std::span<const double> percentiles);

struct Summary {
  double duration_s = 0;
  int64_t completed = 0, failed = 0;
  int64_t total_input_tokens = 0, total_output_tokens = 0;  // over completed requests
  double request_throughput = 0;                            // completed / s
  double output_throughput = 0;                             // output tokens / s
  double total_token_throughput = 0;                        // (input + output) tokens / s
  std::optional<int64_t> good_requests;                     // set when an SLO was given
  double request_goodput = 0;                               // good requests / s
  double goodput_fraction = 0;                              // good / all requests sent
  double peak_output_throughput = 0;  // most content chunks that arrived within one second
  int64_t peak_concurrent_requests = 0;
  // Drafted tokens over completed requests, and the accepted ones among them.
  int64_t total_draft_tokens = 0, total_accepted_draft_tokens = 0;
  Distribution ttft_ms, tpot_ms, itl_ms, e2el_ms;
};

// TTFT, TPOT (only requests with more than one output token), ITL (every gap of every
// request) and E2EL are taken over completed requests, as vLLM does.
Summary summarize(std::span<const RequestResult> results, double duration_s, std::span<const double> percentiles,
                  const Slo& slo);

// Most requests in flight at once, from their [start, start + e2e] intervals.
int64_t peak_concurrency(std::span<const RequestResult> results);

// Most content chunks arriving within any aligned one-second window after the start.
double peak_chunk_rate(std::span<const RequestResult> results);

}  // namespace moe::loadgen
