// The dashboard's window: observations land in the period of their time, periods older
// than the window are dropped, and each period's p50 and p99 are of its own samples.
#include <gtest/gtest.h>

#include "dashboard/metrics_window.h"

namespace moe::dashboard {
namespace {

using namespace std::chrono_literals;

TEST(MetricsWindow, ObservationsLandInTheirPeriod) {
  const Clock::time_point t0 = Clock::now();
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
  const Clock::time_point t0 = Clock::now();
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

TEST(MetricsWindow, PhasesAndRetriesOfFinishedRequests) {
  const Clock::time_point t0 = Clock::now();
  MetricsWindow w(t0, 1s, 3);
  w.finished(t0 + 10ms, RequestPhases{0.2, 0.01, 0.5, 1, true});
  w.finished(t0 + 20ms, RequestPhases{std::nullopt, std::nullopt, 0.3, 0, false});
  const nlohmann::json j = w.json(t0 + 30ms);
  EXPECT_EQ(j["retries"], 1);
  EXPECT_EQ(j["series"][0]["retries"], 1);
  EXPECT_EQ(j["series"][0]["prefill_s"]["n"], 1);
  EXPECT_DOUBLE_EQ(j["series"][0]["prefill_s"]["p50"].get<double>(), 0.2);
  EXPECT_EQ(j["series"][0]["handoff_s"]["n"], 1);
  EXPECT_EQ(j["series"][0]["e2e_s"]["n"], 2);
  EXPECT_DOUBLE_EQ(j["series"][0]["e2e_s"]["p99"].get<double>(), 0.5);
  EXPECT_EQ(j["series"][0]["good"], 1);
}

TEST(SloJudge, StreamedAnswersWithinTheSlosSetAreGood) {
  const SloJudge none;
  EXPECT_FALSE(none.good(200, 0.1, 0.01)) << "no SLO set: no goodput";
  EXPECT_TRUE(none.json().is_null());
  const SloJudge both{0.5, 0.05};
  EXPECT_TRUE(both.good(200, 0.5, 0.05));
  EXPECT_FALSE(both.good(200, 0.51, 0.01));
  EXPECT_FALSE(both.good(200, 0.1, 0.06));
  EXPECT_FALSE(both.good(500, 0.1, 0.01));
  EXPECT_FALSE(both.good(200, std::nullopt, std::nullopt)) << "a whole answer is not judged";
  EXPECT_TRUE(both.good(200, 0.1, std::nullopt)) << "one token: no TPOT to miss";
  const SloJudge ttft_only{0.5, 0};
  EXPECT_TRUE(ttft_only.good(200, 0.4, 9.0));
  EXPECT_EQ(ttft_only.json(), (nlohmann::json{{"ttft_s", 0.5}, {"tpot_s", nullptr}}));
}

}  // namespace
}  // namespace moe::dashboard
