#include "server/served_requests.h"

#include <algorithm>

namespace moe::server {

namespace {

double seconds(dashboard::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

void RequestTiming::saw(const RequestOutput& out) {
  if (!out.tokens.empty() && !first_token) first_token = Clock::now();
  output_tokens = std::max(output_tokens, out.n_output_tokens);
}

ServedRequests::ServedRequests()
    : window_(Clock::now()), rates_(dashboard::health_rate_names()) {}

void ServedRequests::finished(int status, const RequestTiming& t, Clock::time_point now) {
  if (status == 0) return;
  std::lock_guard lock(mu_);
  ++by_status_[status];
  window_.request(now, status);
  if (status >= 400) return;
  if (t.first_token) {
    window_.ttft(now, seconds(*t.first_token - t.arrived));
    if (t.output_tokens > 1) window_.tpot(now, seconds(now - *t.first_token) / double(t.output_tokens - 1));
  }
  window_.finished(now, dashboard::RequestPhases{std::nullopt, std::nullopt, seconds(now - t.arrived), 0});
}

Json ServedRequests::window_json(Clock::time_point now) {
  std::lock_guard lock(mu_);
  Json j = Json(window_.json(now));
  Json by_status = Json::object();
  for (const auto& [status, n] : by_status_) by_status[std::to_string(status)] = n;
  j["totals"] = {{"requests_by_status", std::move(by_status)}};
  j.erase("retries");
  return j;
}

Json ServedRequests::rates(std::vector<uint64_t> totals, Clock::time_point now) {
  std::lock_guard lock(mu_);
  rates_.add(now, std::move(totals));
  return Json(rates_.json());
}

}  // namespace moe::server
