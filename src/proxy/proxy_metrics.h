#pragma once
// The proxy's own Prometheus metrics: requests by the status the client got, the client's
// time to first token and between tokens as the proxy relays them, and legs that failed;
// and, for the dashboard, the same per recent period.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "core/prometheus.h"
#include "dashboard/metrics_window.h"
#include "proxy/request_trace.h"

namespace moe::proxy {

enum class Leg { kPrefill, kDecode };
const char* leg_name(Leg leg);  // "prefill", "decode"
// A finished request's phases for the dashboard's window, from its trace: the prefill and
// hand-off phases, end to end, and its legs' retries (the trace's "retry" events).
dashboard::RequestPhases phases_of(const RequestTrace& trace, http::Clock::time_point finished, const dashboard::SloJudge& slo = {});

// The status counted for a request whose client left before it got an answer (nginx's).
constexpr int kClientClosed = 499;

// Thread-safe: handlers on every I/O thread record into one.
class ProxyMetrics {
 public:
  explicit ProxyMetrics(dashboard::SloJudge slo = {});

  void count_request(int status);
  // An instance that could not be reached, broke off, answered outside the protocol, or
  // failed (5xx).
  void count_leg_failure(Leg leg);
  // A stream whose decode instance failed mid-way, continued elsewhere.
  void count_resume();
  void observe_ttft(double seconds);
  void observe_tpot(double seconds);
  // A finished request's phases: to the prefill instance's hand-off, from there to the
  // decode instance's first event, and end to end.
  void observe_phases(const RequestTrace& trace);

  std::string prometheus_text() const;
  // For the dashboard: the same observations per recent period (MetricsWindow::json), and
  // "totals": the counters above (requests_by_status, leg_failures, resumes) and retries.
  nlohmann::json window_json();

 private:
  mutable std::mutex mu_;
  std::map<int, uint64_t> requests_;
  uint64_t leg_failures_[2] = {0, 0};
  uint64_t resumes_ = 0;
  Histogram ttft_, tpot_, prefill_, handoff_, e2e_;
  dashboard::MetricsWindow window_;
  const dashboard::SloJudge slo_;
};

}  // namespace moe::proxy
