#pragma once
// Runs a serving benchmark: sends the requests at their arrival times (at most
// max_concurrency in flight), streams every answer, and records what each one measured.
// Everything runs on the calling thread's io_context, so timestamps are not delayed by
// other threads of ours.
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "loadgen/dataset.h"
#include "loadgen/openai.h"
#include "loadgen/stats.h"

namespace moe::loadgen {

struct BenchmarkOptions {
  std::string base_url = "http://127.0.0.1:8000";
  Endpoint endpoint = Endpoint::Completions;
  RequestOptions request;  // an empty model is asked of the server (the first of GET /v1/models)
  std::string api_key;  // sent as "Authorization: Bearer KEY" when not empty
  double request_rate = std::numeric_limits<double>::infinity();
  double burstiness = 1.0;
  size_t max_concurrency = 0;  // 0: no limit
  uint64_t seed = 0;
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};  // longest silence of the server
  // Before the run, one test request (the first prompt, at most 8 output tokens, not
  // counted) checks that the server understands the requests. Connection failures and
  // HTTP 503 are retried for this many seconds, so a server still starting is waited for.
  double ready_timeout_s = 0;
};

struct BenchmarkRun {
  std::vector<RequestResult> results;  // in the order of the requests
  double duration_s = 0;               // first send to last answer
  std::string model;                   // the model the requests named
};

// Called on the benchmark thread after each request ends.
using ProgressFn = std::function<void(size_t done, size_t total)>;

// Throws moe::Error when the test request fails (with the server's message); failures of
// the benchmark's own requests are recorded in their results instead.
BenchmarkRun run_benchmark(const BenchmarkOptions& o, const std::vector<SampleRequest>& requests,
                           const ProgressFn& progress = {});

}  // namespace moe::loadgen
