#include "dashboard/metrics_window.h"

#include <algorithm>
#include <cmath>

namespace moe::dashboard {

namespace {

// Enough for the quantiles of a busy period without letting one grow without bound.
constexpr size_t kMaxKept = 4096;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double quantile(std::vector<double>& v, double q) {
  const size_t k = std::min(v.size() - 1, size_t(std::floor(q * double(v.size()))));
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(k), v.end());
  return v[k];
}

}  // namespace

bool SloJudge::good(int status, std::optional<double> ttft_seen, std::optional<double> tpot_seen) const {
  if (!any() || status != 200 || !ttft_seen) return false;
  if (ttft_s > 0 && *ttft_seen > ttft_s) return false;
  return !(tpot_s > 0 && tpot_seen && *tpot_seen > tpot_s);
}

nlohmann::json SloJudge::json() const {
  if (!any()) return nullptr;
  return {{"ttft_s", ttft_s > 0 ? nlohmann::json(ttft_s) : nlohmann::json()}, {"tpot_s", tpot_s > 0 ? nlohmann::json(tpot_s) : nlohmann::json()}};
}

MetricsWindow::MetricsWindow(Clock::time_point start, std::chrono::milliseconds period, size_t periods)
    : start_(start), period_(period), periods_(periods) {}

void MetricsWindow::Samples::add(double v) {
  ++n;
  if (kept.size() < kMaxKept) kept.push_back(v);
}

const nlohmann::json& MetricsWindow::Samples::json() {
  if (summarised_n == n) return summary;
  summarised_n = n;
  if (kept.empty()) {
    summary = {{"n", n}, {"p50", nullptr}, {"p99", nullptr}};
  } else {
    std::vector<double> v = kept;
    summary = {{"n", n}, {"p50", quantile(v, 0.5)}, {"p99", quantile(v, 0.99)}};
  }
  return summary;
}

MetricsWindow::Period& MetricsWindow::at(Clock::time_point t) {
  const int64_t index = std::max<int64_t>(0, (t - start_) / period_);
  // Observations come from several threads, so one may be a moment late: it goes to the
  // period it belongs to, or to the oldest kept when that one is gone.
  auto it = std::lower_bound(window_.begin(), window_.end(), index, [](const Period& p, int64_t i) { return p.index < i; });
  if (it != window_.end() && it->index == index) return *it;
  if (it == window_.begin() && !window_.empty() && index <= window_.back().index - int64_t(periods_)) return window_.front();
  it = window_.insert(it, Period{});
  it->index = index;
  // Only the last `periods_` periods are kept (quiet ones are not stored at all).
  const int64_t newest = window_.back().index;
  while (window_.front().index <= newest - int64_t(periods_)) window_.pop_front();
  return *std::lower_bound(window_.begin(), window_.end(), index, [](const Period& p, int64_t i) { return p.index < i; });
}

void MetricsWindow::request(Clock::time_point at_time, int status) {
  Period& p = at(at_time);
  ++p.requests;
  if (status >= 400) ++p.errors;
}

void MetricsWindow::ttft(Clock::time_point t, double s) { at(t).ttft.add(s); }
void MetricsWindow::tpot(Clock::time_point t, double s) { at(t).tpot.add(s); }

void MetricsWindow::leg_failure(Clock::time_point t) { ++at(t).leg_failures; }
void MetricsWindow::resume(Clock::time_point t) { ++at(t).resumes; }

void MetricsWindow::finished(Clock::time_point t, const RequestPhases& phases) {
  Period& p = at(t);
  if (phases.prefill_s) p.prefill.add(*phases.prefill_s);
  if (phases.handoff_s) p.handoff.add(*phases.handoff_s);
  p.e2e.add(phases.e2e_s);
  p.good += phases.good ? 1 : 0;
  p.retries += phases.retries;
  retries_ += phases.retries;
}

nlohmann::json MetricsWindow::json(Clock::time_point now) {
  (void)at(now);  // the current period, even when nothing happened in it yet
  nlohmann::json series = nlohmann::json::array();
  for (Period& p : window_) {
    series.push_back({{"t_s", seconds(p.index * period_)},
                      {"requests", p.requests},
                      {"errors", p.errors},
                      {"good", p.good},
                      {"ttft_s", p.ttft.json()},
                      {"tpot_s", p.tpot.json()},
                      {"prefill_s", p.prefill.json()},
                      {"handoff_s", p.handoff.json()},
                      {"e2e_s", p.e2e.json()},
                      {"retries", p.retries},
                      {"resumes", p.resumes},
                      {"leg_failures", p.leg_failures}});
  }
  return {{"period_s", seconds(period_)}, {"uptime_s", seconds(now - start_)}, {"series", series}, {"retries", retries_}};
}

}  // namespace moe::dashboard
