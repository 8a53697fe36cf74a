// Rates of counters read now and then: per second between the oldest reading within the
// span and the newest, null until two readings, a counter that went down counts 0, and
// clear() starts again.
#include "dashboard/counter_rates.h"

#include <gtest/gtest.h>

namespace moe::dashboard {
namespace {

using namespace std::chrono_literals;

TEST(CounterRates, PerSecondOverTheReadingsOfTheSpan) {
  CounterRates r({"a", "b"}, 10s);
  const CounterRates::Clock::time_point t0{};
  EXPECT_TRUE(r.json().is_null());
  r.add(t0, {0, 100});
  EXPECT_TRUE(r.json().is_null());
  r.add(t0 + 4s, {8, 60});
  EXPECT_DOUBLE_EQ(r.json()["over_s"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(r.json()["a"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(r.json()["b"].get<double>(), 0.0);
  // t0 falls out of the span; t0 + 4 s is within it.
  r.add(t0 + 12s, {24, 60});
  EXPECT_DOUBLE_EQ(r.json()["over_s"].get<double>(), 8.0);
  EXPECT_DOUBLE_EQ(r.json()["a"].get<double>(), 2.0);
  // Two readings are always kept, however far apart.
  r.add(t0 + 100s, {24, 60});
  EXPECT_DOUBLE_EQ(r.json()["over_s"].get<double>(), 88.0);
  r.clear();
  EXPECT_TRUE(r.json().is_null());
}

}  // namespace
}  // namespace moe::dashboard
