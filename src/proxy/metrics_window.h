#pragma once
// The proxy's recent history for the dashboard: what ProxyMetrics observes, also kept per
// period (default 2 s) over the last periods (default 300: ten minutes), with the p50 and
// p99 of each period's latencies. The totals since the start are ProxyMetrics' own
// counters (it feeds this under its lock). Not thread-safe by itself.
#include <chrono>
#include <cstdint>
#include <deque>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "http/http_client.h"

namespace moe::proxy {

class RequestTrace;

class MetricsWindow {
 public:
  MetricsWindow(http::Clock::time_point start, std::chrono::milliseconds period = std::chrono::seconds(2),
                size_t periods = 300);

  void request(http::Clock::time_point at, int status);
  void ttft(http::Clock::time_point at, double seconds);
  void tpot(http::Clock::time_point at, double seconds);
  void leg_failure(http::Clock::time_point at);
  void resume(http::Clock::time_point at);
  // A finished request: its prefill and hand-off phases, end to end, and its legs' retries
  // from the trace's events.
  void finished(http::Clock::time_point at, const RequestTrace& trace);

  // {"period_s", "series": [{"t_s", "requests", "errors", "ttft_s": {"n", "p50", "p99"},
  // "tpot_s", "prefill_s", "handoff_s", "e2e_s", "retries", "resumes", "leg_failures"}],
  // "retries": since the start}, oldest period first; t_s counts from the start.
  nlohmann::json json(http::Clock::time_point now);

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
    int64_t requests = 0, errors = 0, retries = 0, resumes = 0, leg_failures = 0;
    Samples ttft, tpot, prefill, handoff, e2e;
  };
  Period& at(http::Clock::time_point t);

  const http::Clock::time_point start_;
  const std::chrono::milliseconds period_;
  const size_t periods_;
  std::deque<Period> window_;
  int64_t retries_ = 0;
};

}  // namespace moe::proxy
