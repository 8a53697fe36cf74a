// What the registry makes of its probes' /health answers for the dashboard: the counters as
// reported, rates over the last span of reports, and a restart counted when the reported
// start time changes (the rates then start again).
#include <gtest/gtest.h>

#include "proxy/registry.h"

namespace moe::proxy {
namespace {

using namespace std::chrono_literals;

HealthReport report(double started, uint64_t requests, uint64_t generated, uint64_t pulled) {
  return parse_health_report(nlohmann::json{
      {"status", "ok"},
      {"totals", {{"requests_finished", requests}, {"prompt_tokens", 10 * requests}, {"generation_tokens", generated},
                  {"kv_pulls", requests}, {"kv_pulled_bytes", pulled}}},
      {"started_unix_s", started}});
}

TEST(RegistryReports, RatesAreOverTheLastReportsAndRestartsAreCounted) {
  Registry registry({{"d0", "http://127.0.0.1:9", InstanceRole::decode, 1.0}});
  Instance& d = *registry.all().front();
  const Clock::time_point t0 = Clock::now();
  const auto describe = [&] { return registry.describe(t0).at(0); };

  registry.report_probe(d, report(100.5, 0, 0, 0), t0);
  EXPECT_TRUE(describe()["rates"].is_null()) << "one report has no rate";
  registry.report_probe(d, report(100.5, 4, 40, 4096), t0 + 2s);
  nlohmann::json i = describe();
  EXPECT_DOUBLE_EQ(i["rates"]["over_s"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(i["rates"]["requests_finished"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(i["rates"]["prompt_tokens"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(i["rates"]["generation_tokens"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(i["rates"]["kv_pulled_bytes"].get<double>(), 2048.0);
  EXPECT_EQ(i["reported"]["generation_tokens"], 40);
  EXPECT_EQ(i["reported"]["kv_pulled_bytes"], 4096);
  EXPECT_EQ(i["restarts"], 0);

  // Reports older than the span leave it: the rate is that of the last 10 s.
  registry.report_probe(d, report(100.5, 4, 40, 4096), t0 + 12s);
  registry.report_probe(d, report(100.5, 14, 140, 4096), t0 + 17s);
  i = describe();
  EXPECT_DOUBLE_EQ(i["rates"]["over_s"].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(i["rates"]["requests_finished"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(i["rates"]["kv_pulled_bytes"].get<double>(), 0.0);

  // A new start time: a restart, counters from zero, no rate until the next report.
  registry.report_probe(d, report(200.25, 1, 5, 0), t0 + 18s);
  i = describe();
  EXPECT_EQ(i["restarts"], 1);
  EXPECT_TRUE(i["rates"].is_null());
  EXPECT_EQ(i["reported"]["requests_finished"], 1);
  // A failed probe is no report: nothing changes.
  registry.report_probe(d, std::nullopt, t0 + 19s);
  EXPECT_EQ(describe()["restarts"], 1);
}

}  // namespace
}  // namespace moe::proxy
