#pragma once
// Rates of counters that are read now and then (an instance's /health totals at each
// probe, or at each dashboard poll): per second over the readings of the last `span`, the
// oldest one kept that is within it and the newest. Not thread-safe by itself.
#include <chrono>
#include <cstdint>
#include <deque>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace moe::dashboard {

// The totals of an instance's /health (docs/api.md) whose rates the dashboard shows.
std::vector<std::string> health_rate_names();

class CounterRates {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kDefaultSpan{10};

  explicit CounterRates(std::vector<std::string> names, std::chrono::seconds span = kDefaultSpan);

  // One reading, a value per name in the constructor's order.
  void add(Clock::time_point t, std::vector<uint64_t> values);
  // The counters started again (a restart): earlier readings no longer count.
  void clear() { readings_.clear(); }
  // {"over_s": seconds between the readings used, NAME: per second, ...}; null until there
  // are two readings. A counter that went down counts 0.
  nlohmann::json json() const;

 private:
  std::vector<std::string> names_;
  std::chrono::seconds span_;
  std::deque<std::pair<Clock::time_point, std::vector<uint64_t>>> readings_;
};

}  // namespace moe::dashboard
