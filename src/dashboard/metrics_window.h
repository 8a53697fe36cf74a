#pragma once
// Recent history for the dashboard: requests and their latencies as the proxy (or a lone
// instance) observes them, kept per period (default 2 s) over the last periods (default
// 300: ten minutes), with the p50 and p99 of each period's latencies. Totals since the
// start are the owner's own counters (ProxyMetrics feeds this under its lock). Not
// thread-safe by itself.
#include <chrono>
#include <cstdint>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace moe::dashboard {

using Clock = std::chrono::steady_clock;

// A finished request's phases: arrival to the prefill instance's hand-off, that to the
// decode instance's first event (both absent without a hand-off), and arrival to the end.
struct RequestPhases {
  std::optional<double> prefill_s, handoff_s;
  double e2e_s = 0;
  int64_t retries = 0;  // legs tried again on another instance
  bool good = false;    // within the latency SLOs (SloJudge): counted as goodput
};

// Latency SLOs a request is judged by for goodput (as vLLM's `bench serve --goodput`): a
// streamed answer (status 200) whose time to first token and mean time per output token
// after it are within those set. Whole answers, whose token times no one in between sees,
// are not judged. 0: not set; none set: no goodput is counted.
struct SloJudge {
  double ttft_s = 0, tpot_s = 0;
  bool any() const { return ttft_s > 0 || tpot_s > 0; }
  bool good(int status, std::optional<double> ttft_s_seen, std::optional<double> tpot_s_seen) const;
  nlohmann::json json() const;  // {"ttft_s", "tpot_s"}, null where not set; null when none
};

class MetricsWindow {
 public:
  MetricsWindow(Clock::time_point start, std::chrono::milliseconds period = std::chrono::seconds(2),
                size_t periods = 300);

  void request(Clock::time_point at, int status);
  void ttft(Clock::time_point at, double seconds);
  void tpot(Clock::time_point at, double seconds);
  void leg_failure(Clock::time_point at);
  void resume(Clock::time_point at);
  void finished(Clock::time_point at, const RequestPhases& phases);

  // {"period_s", "series": [{"t_s", "requests", "errors", "good", "ttft_s": {"n", "p50", "p99"},
  // "tpot_s", "prefill_s", "handoff_s", "e2e_s", "retries", "resumes", "leg_failures"}],
  // "retries": since the start}, oldest period first; t_s counts from the start.
  nlohmann::json json(Clock::time_point now);

 private:
  struct Samples {
    int64_t n = 0;
    std::vector<double> kept;  // the first kMaxKept of the period
    void add(double v);
    // Quantiles are taken again only when samples came since the last time: a poll costs
    // the periods that changed (mostly the current one), not the whole window.
    const nlohmann::json& json();
    int64_t summarised_n = -1;
    nlohmann::json summary;
  };
  struct Period {
    int64_t index = 0;
    int64_t requests = 0, errors = 0, good = 0, retries = 0, resumes = 0, leg_failures = 0;
    Samples ttft, tpot, prefill, handoff, e2e;
  };
  Period& at(Clock::time_point t);

  const Clock::time_point start_;
  const std::chrono::milliseconds period_;
  const size_t periods_;
  std::deque<Period> window_;
  int64_t retries_ = 0;
};

}  // namespace moe::dashboard
