// The dashboard's window: observations land in the period of their time, periods older
// than the window are dropped, and each period's p50 and p99 are of its own samples; the
// totals beside it are ProxyMetrics' counters, which keep counting.
#include <gtest/gtest.h>

#include "proxy/metrics_window.h"
#include "proxy/proxy_metrics.h"
#include "proxy/request_trace.h"

namespace moe::proxy {
namespace {

using namespace std::chrono_literals;

TEST(MetricsWindow, ObservationsLandInTheirPeriod) {
  const http::Clock::time_point t0 = http::Clock::now();
  MetricsWindow w(t0, 1s, 3);
  for (int i = 1; i <= 100; ++i) w.ttft(t0 + 100ms, 0.01 * i);
  w.request(t0 + 200ms, 200);
  w.request(t0 + 1500ms, 503);
  w.tpot(t0 + 1600ms, 0.02);
  const nlohmann::json j = w.json(t0 + 1700ms);
  ASSERT_EQ(j["series"].size(), 2u);
  const nlohmann::json& p0 = j["series"][0];
  EXPECT_EQ(p0["t_s"], 0.0);
  EXPECT_EQ(p0["requests"], 1);
  EXPECT_EQ(p0["errors"], 0);
  EXPECT_EQ(p0["ttft_s"]["n"], 100);
  EXPECT_DOUBLE_EQ(p0["ttft_s"]["p50"].get<double>(), 0.51);
  EXPECT_DOUBLE_EQ(p0["ttft_s"]["p99"].get<double>(), 1.0);
  EXPECT_TRUE(p0["tpot_s"]["p50"].is_null());
  const nlohmann::json& p1 = j["series"][1];
  EXPECT_EQ(p1["t_s"], 1.0);
  EXPECT_EQ(p1["errors"], 1);
  EXPECT_DOUBLE_EQ(p1["tpot_s"]["p50"].get<double>(), 0.02);
}

TEST(MetricsWindow, OldPeriodsGo) {
  const http::Clock::time_point t0 = http::Clock::now();
  MetricsWindow w(t0, 1s, 3);
  for (int s = 0; s < 10; ++s) {
    w.request(t0 + std::chrono::seconds(s), 200);
    w.resume(t0 + std::chrono::seconds(s));
    w.leg_failure(t0 + std::chrono::seconds(s));
  }
  const nlohmann::json j = w.json(t0 + 9500ms);
  ASSERT_EQ(j["series"].size(), 3u);
  EXPECT_EQ(j["series"][0]["t_s"], 7.0);
  EXPECT_EQ(j["series"][2]["t_s"], 9.0);
  EXPECT_EQ(j["series"][2]["resumes"], 1);
  // A quiet stretch still shows the current period.
  EXPECT_EQ(w.json(t0 + 20s)["series"].back()["t_s"], 20.0);
}

TEST(MetricsWindow, RetriesComeFromTheTrace) {
  const http::Clock::time_point t0 = http::Clock::now();
  MetricsWindow w(t0, 1s, 3);
  RequestTrace trace("cmpl-1", Api::kCompletion, false, t0);
  trace.mark("routed", {{"leg", "prefill"}, {"instance", "p0"}, {"reason", "cost"}});
  trace.mark("retry", {{"leg", "prefill"}, {"instance", "p0"}});
  trace.prefill_done();
  trace.decode_started();
  w.finished(t0 + 10ms, trace);
  const nlohmann::json j = w.json(t0 + 20ms);
  EXPECT_EQ(j["retries"], 1);
  EXPECT_EQ(j["series"][0]["retries"], 1);
  EXPECT_EQ(j["series"][0]["prefill_s"]["n"], 1);
  EXPECT_EQ(j["series"][0]["handoff_s"]["n"], 1);
  EXPECT_EQ(j["series"][0]["e2e_s"]["n"], 1);
}

TEST(MetricsWindow, TotalsAreTheProxysCountersSinceTheStart) {
  ProxyMetrics m;
  for (int i = 0; i < 10; ++i) {
    m.count_request(200);
    m.count_resume();
    m.count_leg_failure(Leg::kDecode);
  }
  m.count_request(503);
  const nlohmann::json j = m.window_json();
  EXPECT_EQ(j["totals"]["requests_by_status"]["200"], 10);
  EXPECT_EQ(j["totals"]["requests_by_status"]["503"], 1);
  EXPECT_EQ(j["totals"]["resumes"], 10);
  EXPECT_EQ(j["totals"]["leg_failures"]["decode"], 10);
  EXPECT_EQ(j["totals"]["leg_failures"]["prefill"], 0);
  EXPECT_EQ(j["totals"]["retries"], 0);
  EXPECT_FALSE(j.contains("retries"));
  EXPECT_EQ(j["series"].back()["requests"], 11);
}

}  // namespace
}  // namespace moe::proxy
