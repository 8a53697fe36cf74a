#pragma once
// The benchmark's client, on one thread, sending the same completion request again and
// again, each one as soon as the previous answer has ended. A request's latency runs from
// the send to the last byte of its answer (whole or streamed); an answer counts only when
// its status is 200 and its text is the one expected, else it is an error.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace moe::bench {

struct LoadSpec {
  std::string url;  // the target's base, http://HOST:PORT
  std::string body;
  bool stream = false;
  std::string expected_text;  // every answer's text (the events' texts joined, when streamed)
  int concurrency = 1;
  // Either a number of requests, after `warmup_requests` that are not counted...
  size_t requests = 0;
  size_t warmup_requests = 0;
  // ...or, when `requests` is 0, a time: answers ending in [warmup_s, warmup_s + duration_s)
  // count; no request is sent after that.
  double warmup_s = 0;
  double duration_s = 0;
  // When set and raised, nothing more is sent.
  const std::atomic<bool>* stop = nullptr;
  // When set: how many requests the backend behind the target has had so far, read before
  // and after the run (or, in turns, each request) to count the ones this load caused.
  std::function<uint64_t()> backend_requests;
};

struct LoadResult {
  std::vector<double> latencies_ms;  // of the counted answers
  size_t sent = 0;                   // requests, warm-up and failed ones included
  size_t errors = 0;                 // at any time, warm-up included
  std::string first_error;
  // The counted window; for a number of requests, the first counted send to the last
  // counted answer (in turns: the counted requests' own time).
  double elapsed_s = 0;
  uint64_t backend_requests = 0;  // what the backend got for the `sent` requests
  double rate() const { return elapsed_s > 0 ? double(latencies_ms.size()) / elapsed_s : 0; }
};

// `concurrency` workers, each over its own kept-alive connection. Returns when all stopped.
LoadResult run_closed_loop(const LoadSpec& spec);

// One kept-alive connection per spec and one request at a time, the specs taking turns
// request by request, so that whatever else the machine does at a moment touches all of
// them alike. Each spec's `requests` and `warmup_requests` apply; its concurrency and
// times do not. The first spec's `stop` stops all.
std::vector<LoadResult> run_in_turns(const std::vector<LoadSpec>& specs);

}  // namespace moe::bench
