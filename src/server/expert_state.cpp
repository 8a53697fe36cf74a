#include "server/expert_state.h"

#include <algorithm>
#include <chrono>

namespace moe::server {

namespace {

// [layer][rank] -> the experts the rank holds, ascending, each once.
Json replicas(const placement::Placement& p) {
  Json layers = Json::array();
  for (const placement::LayerPlacement& l : p.layers) {
    std::vector<std::vector<int32_t>> on(size_t(p.devices()));
    for (size_t s = 0; s < l.slots.size(); ++s) on[size_t(l.devices[s])].push_back(l.slots[s]);
    for (std::vector<int32_t>& v : on) {
      std::sort(v.begin(), v.end());
      v.erase(std::unique(v.begin(), v.end()), v.end());
    }
    layers.push_back(on);
  }
  return layers;
}

Json event_json(const ReplacementEvent& e) {
  return {{"planned_unix_s", e.planned_unix_s},
          {"planned_step", e.planned_step},
          {"plan_ms", e.plan_ms},
          {"moves", e.moves},
          {"bytes", e.bytes},
          {"balance_before", e.balance_before},
          {"balance_after", e.balance_after},
          {"switched", e.switched},
          {"switched_unix_s", e.switched ? Json(e.switched_unix_s) : Json()},
          {"switched_step", e.switched ? Json(e.switched_step) : Json()}};
}

}  // namespace

Json expert_state_json(const ExpertParallel& ep) {
  const ExpertLoadRecorder& rec = ep.load();
  const int64_t layers = rec.layers(), experts = rec.experts();
  const int32_t ranks = rec.ranks();

  int64_t steps = 0;
  const std::vector<int64_t> summed = rec.window_load(&steps);
  std::vector<std::vector<int64_t>> load(static_cast<size_t>(layers));
  for (int64_t l = 0; l < layers; ++l) load[size_t(l)].assign(summed.begin() + l * experts, summed.begin() + (l + 1) * experts);
  const std::vector<int64_t> pairs = rec.window_rank_pairs();
  std::vector<std::vector<int64_t>> device_pairs(static_cast<size_t>(layers));
  for (int64_t l = 0; l < layers; ++l) device_pairs[size_t(l)].assign(pairs.begin() + l * ranks, pairs.begin() + (l + 1) * ranks);

  Json periods = Json::array();
  for (const LoadPeriod& p : rec.periods()) {
    periods.push_back({{"start_unix_s", p.start_unix_s}, {"steps", p.steps}, {"imbalance", per_layer_imbalance(p.rank_pairs, layers, ranks)}});
  }
  Json events = Json::array();
  for (const ReplacementEvent& e : ep.view().events()) events.push_back(event_json(e));

  const ReplacementOptions& o = ep.replacement_options();
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return {{"rank", ep.rank()},
          {"ranks", ranks},
          {"moe_layers", layers},
          {"experts", experts},
          {"now_unix_s", now},
          {"window", {{"steps", steps},
                      {"synced_steps", rec.synced_steps()},
                      {"load", load},
                      {"rank_pairs", device_pairs},
                      {"imbalance", layer_imbalance(pairs, layers, ranks)},
                      {"layer_imbalance", per_layer_imbalance(pairs, layers, ranks)}}},
          {"replicas", replicas(ep.view().placement())},
          {"periods", {{"period_s", ExpertLoadRecorder::kPeriodSeconds}, {"series", std::move(periods)}}},
          {"replacement", {{"interval_s", o.interval.count()}, {"max_moves", o.max_moves}, {"target_balance", o.target_balance}}},
          {"replacements", std::move(events)}};
}

}  // namespace moe::server
