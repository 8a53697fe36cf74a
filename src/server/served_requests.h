#pragma once
// A lone instance's own view for its dashboard: the generation requests it answered, as
// its clients saw them (status, time to first token, time per output token after it, end
// to end), kept per 2 s period (dashboard::MetricsWindow) with the answers by status since
// the start; and the rates of its /health totals between dashboard polls. Thread-safe: the
// I/O threads report, a dashboard poll reads.
#include <chrono>
#include <map>
#include <mutex>
#include <optional>

#include "dashboard/counter_rates.h"
#include "dashboard/metrics_window.h"
#include "engine/request.h"
#include "server/json_fields.h"

namespace moe::server {

// One request's times, filled in by its handler.
struct RequestTiming {
  using Clock = dashboard::Clock;
  Clock::time_point arrived = Clock::now();
  std::optional<Clock::time_point> first_token;
  int64_t output_tokens = 0;  // of its longest choice
  void saw(const RequestOutput& out);
};

class ServedRequests {
 public:
  using Clock = dashboard::Clock;
  ServedRequests();

  // A request answered with `status` (0: the client left before any answer: not counted).
  void finished(int status, const RequestTiming& timing, Clock::time_point now = Clock::now());
  // MetricsWindow's JSON with "totals": {"requests_by_status"}.
  Json window_json(Clock::time_point now = Clock::now());
  // The /health totals read now: their rates since the polls of the last 10 s.
  Json rates(std::vector<uint64_t> totals, Clock::time_point now = Clock::now());

 private:
  std::mutex mu_;
  dashboard::MetricsWindow window_;
  std::map<int, int64_t> by_status_;
  dashboard::CounterRates rates_;
};

}  // namespace moe::server
