#include "dashboard/counter_rates.h"

namespace moe::dashboard {

std::vector<std::string> health_rate_names() { return {"requests_finished", "prompt_tokens", "generation_tokens", "kv_pulled_bytes"}; }

CounterRates::CounterRates(std::vector<std::string> names, std::chrono::seconds span) : names_(std::move(names)), span_(span) {}

void CounterRates::add(Clock::time_point t, std::vector<uint64_t> values) {
  values.resize(names_.size(), 0);
  readings_.emplace_back(t, std::move(values));
  while (readings_.size() > 2 && t - readings_.front().first > span_) readings_.pop_front();
}

nlohmann::json CounterRates::json() const {
  if (readings_.size() < 2) return nullptr;
  const auto& [t0, a] = readings_.front();
  const auto& [t1, b] = readings_.back();
  const double dt = std::chrono::duration<double>(t1 - t0).count();
  if (dt <= 0) return nullptr;
  nlohmann::json out{{"over_s", dt}};
  for (size_t i = 0; i < names_.size(); ++i) out[names_[i]] = b[i] >= a[i] ? double(b[i] - a[i]) / dt : 0.0;
  return out;
}

}  // namespace moe::dashboard
