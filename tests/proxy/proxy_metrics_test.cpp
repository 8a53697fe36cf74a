// What ProxyMetrics gives the dashboard: a finished request's phases and retries from its
// trace, and totals that are its own counters since the start.
#include <gtest/gtest.h>

#include "proxy/proxy_metrics.h"
#include "proxy/request_trace.h"

namespace moe::proxy {
namespace {

using namespace std::chrono_literals;

TEST(ProxyMetrics, PhasesAndRetriesComeFromTheTrace) {
  const http::Clock::time_point t0 = http::Clock::now();
  RequestTrace trace("cmpl-1", Api::kCompletion, false, t0);
  trace.mark("routed", {{"leg", "prefill"}, {"instance", "p0"}, {"reason", "cost"}});
  trace.mark("retry", {{"leg", "prefill"}, {"instance", "p0"}});
  trace.prefill_done();
  trace.decode_started();
  const dashboard::RequestPhases p = phases_of(trace, t0 + 10s);
  EXPECT_EQ(p.retries, 1);
  ASSERT_TRUE(p.prefill_s && p.handoff_s);
  EXPECT_GE(*p.prefill_s, 0);
  EXPECT_GE(*p.handoff_s, 0);
  EXPECT_DOUBLE_EQ(p.e2e_s, 10.0);
  // A stream of three texts 1 ms apart after its first at 100 ms, judged by its SLOs.
  RequestTrace streamed("cmpl-3", Api::kCompletion, true, t0);
  for (int i = 0; i < 4; ++i) streamed.text_sent(t0 + 100ms + std::chrono::milliseconds(i));
  streamed.first_token();
  streamed.set_status(200);
  ASSERT_TRUE(streamed.tpot_s());
  EXPECT_NEAR(*streamed.tpot_s(), 0.001, 1e-9);
  EXPECT_FALSE(phases_of(streamed, t0 + 1s).good) << "no SLO set";
  EXPECT_TRUE(phases_of(streamed, t0 + 1s, dashboard::SloJudge{10.0, 0.002}).good);
  EXPECT_FALSE(phases_of(streamed, t0 + 1s, dashboard::SloJudge{10.0, 0.0005}).good);
  RequestTrace direct("cmpl-2", Api::kCompletion, false, t0);
  const dashboard::RequestPhases q = phases_of(direct, t0 + 1s);
  EXPECT_FALSE(q.prefill_s || q.handoff_s);
  EXPECT_EQ(q.retries, 0);
}

TEST(ProxyMetrics, WindowTotalsAreItsCountersSinceTheStart) {
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
