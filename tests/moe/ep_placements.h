#pragma once
// Placements for the expert-parallel tests: MoE layers of 8 experts over `ranks` ranks.
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace moe::testing {

inline nlohmann::json placement_json(int ranks, int moe_layers, int slots_per_device,
                                     const std::vector<std::pair<int, int>>& layer) {
  nlohmann::json slots = nlohmann::json::array(), devices = nlohmann::json::array();
  for (const auto& [expert, rank] : layer) {
    slots.push_back(expert);
    devices.push_back(rank);
  }
  nlohmann::json layers = nlohmann::json::array();
  for (int l = 0; l < moe_layers; ++l) layers.push_back({{"slots", slots}, {"devices", devices}});
  nlohmann::json p = {{"nodes", 1}, {"devices_per_node", ranks}, {"layers", layers}};
  if (slots_per_device > 0) p["slots_per_device"] = slots_per_device;
  return p;
}

// Every expert once, plus replicas of experts 0 and 5 on every rank, and of expert 7 on the
// rank before its own: rank 0's tokens for expert 7 then spread over two other ranks.
inline nlohmann::json redundant_placement(int ranks, int moe_layers) {
  std::vector<std::pair<int, int>> layer;
  for (int e = 0; e < 8; ++e) layer.emplace_back(e, e * ranks / 8);
  for (int r = 0; r < ranks; ++r) {
    for (const int e : {0, 5}) {
      if (e * ranks / 8 != r) layer.emplace_back(e, r);
    }
  }
  if (ranks > 2) layer.emplace_back(7, ranks - 2);
  return placement_json(ranks, moe_layers, 0, layer);
}

// Experts 0-5 on rank 0 and 6-7 on the last rank, with spare replicas of 0-5 on the ranks
// after 0: a poor start that re-placement improves by moving the spares.
inline nlohmann::json lopsided_placement(int ranks, int moe_layers) {
  std::vector<std::pair<int, int>> layer;
  for (int e = 0; e < 8; ++e) layer.emplace_back(e, e < 6 ? 0 : ranks - 1);
  for (int e = 0; e < 6; ++e) layer.emplace_back(e, 1 + e % (ranks - 1));
  return placement_json(ranks, moe_layers, 8 * moe_layers, layer);
}

inline std::string write_placement(const std::string& path, const nlohmann::json& p) {
  std::ofstream(path) << p.dump();
  return path;
}

}  // namespace moe::testing
