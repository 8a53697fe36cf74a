#include "proxy/proxy_metrics.h"

#include <utility>
#include <vector>

namespace moe::proxy {

const char* leg_name(Leg leg) { return leg == Leg::kPrefill ? "prefill" : "decode"; }

dashboard::RequestPhases phases_of(const RequestTrace& trace, http::Clock::time_point finished, const dashboard::SloJudge& slo) {
  const auto seconds = [](http::Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  dashboard::RequestPhases p;
  if (trace.prefill_done_at()) p.prefill_s = seconds(*trace.prefill_done_at() - trace.arrived());
  if (trace.prefill_done_at() && trace.decode_started_at()) p.handoff_s = seconds(*trace.decode_started_at() - *trace.prefill_done_at());
  p.e2e_s = seconds(finished - trace.arrived());
  for (const nlohmann::json& e : trace.events()) p.retries += e.value("event", "") == "retry" ? 1 : 0;
  std::optional<double> ttft;
  if (trace.first_token_at()) ttft = seconds(*trace.first_token_at() - trace.arrived());
  p.good = slo.good(trace.status(), ttft, trace.tpot_s());
  return p;
}

// vLLM's buckets (as the engine's), so the same dashboards and alert thresholds apply.
ProxyMetrics::ProxyMetrics(dashboard::SloJudge slo)
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
             160.0, 640.0, 2560.0}),
      tpot_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}),
      prefill_(ttft_.bounds()),
      handoff_({0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0}),
      e2e_({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
            1920.0, 7680.0}),
      window_(http::Clock::now()),
      slo_(slo) {}

void ProxyMetrics::observe_phases(const RequestTrace& trace) {
  const http::Clock::time_point now = http::Clock::now();
  const dashboard::RequestPhases phases = phases_of(trace, now, slo_);
  std::lock_guard lock(mu_);
  if (phases.prefill_s) prefill_.observe(*phases.prefill_s);
  if (phases.handoff_s) handoff_.observe(*phases.handoff_s);
  e2e_.observe(phases.e2e_s);
  window_.finished(now, phases);
}

void ProxyMetrics::count_request(int status) {
  std::lock_guard lock(mu_);
  ++requests_[status];
  window_.request(http::Clock::now(), status);
}

void ProxyMetrics::count_leg_failure(Leg leg) {
  std::lock_guard lock(mu_);
  ++leg_failures_[leg == Leg::kPrefill ? 0 : 1];
  window_.leg_failure(http::Clock::now());
}

void ProxyMetrics::count_resume() {
  std::lock_guard lock(mu_);
  ++resumes_;
  window_.resume(http::Clock::now());
}

void ProxyMetrics::observe_ttft(double seconds) {
  std::lock_guard lock(mu_);
  ttft_.observe(seconds);
  window_.ttft(http::Clock::now(), seconds);
}

void ProxyMetrics::observe_tpot(double seconds) {
  std::lock_guard lock(mu_);
  tpot_.observe(seconds);
  window_.tpot(http::Clock::now(), seconds);
}

nlohmann::json ProxyMetrics::window_json() {
  std::lock_guard lock(mu_);
  nlohmann::json j = window_.json(http::Clock::now());
  nlohmann::json by_status = nlohmann::json::object();
  for (const auto& [status, n] : requests_) by_status[std::to_string(status)] = n;
  j["totals"] = {{"requests_by_status", std::move(by_status)},
                 {"leg_failures", {{leg_name(Leg::kPrefill), leg_failures_[0]}, {leg_name(Leg::kDecode), leg_failures_[1]}}},
                 {"retries", j["retries"]},
                 {"resumes", resumes_}};
  j["slo"] = slo_.json();
  j.erase("retries");
  return j;
}

std::string ProxyMetrics::prometheus_text() const {
  std::lock_guard lock(mu_);
  // The proxy serves whatever model its instances do, so the model_name label is empty
  // (which Prometheus treats as absent).
  PrometheusText w("");
  std::vector<std::pair<std::string, double>> by_status;
  for (const auto& [status, n] : requests_) by_status.emplace_back(std::to_string(status), double(n));
  w.labelled_counter("proxy_requests_total", "Completion and chat requests by the HTTP status the client got (499: it left first).",
                     "status", by_status);
  w.histogram("proxy_time_to_first_token_seconds", "Seconds from a streamed request's arrival to its first relayed text.", ttft_);
  w.histogram("proxy_time_per_output_token_seconds", "Seconds between a streamed request's relayed text events.", tpot_);
  w.labelled_counter("proxy_leg_failures_total", "Legs whose instance was unreachable, broke off, or failed.", "leg",
                     {{leg_name(Leg::kPrefill), double(leg_failures_[0])}, {leg_name(Leg::kDecode), double(leg_failures_[1])}});
  w.histogram("proxy_prefill_seconds", "Seconds from a request's arrival to its prefill instance's hand-off (routing and queueing included).",
              prefill_);
  w.histogram("proxy_handoff_seconds", "Seconds from the hand-off to the decode instance's first event (routing, KV pull, first step).",
              handoff_);
  w.histogram("proxy_e2e_request_seconds", "Seconds from a request's arrival to its end.", e2e_);
  w.counter("proxy_stream_resumes_total", "Streams whose decode instance failed mid-way, continued at other instances.",
            double(resumes_));
  return w.take();
}

}  // namespace moe::proxy
