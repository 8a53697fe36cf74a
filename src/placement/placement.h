#pragma once
// Topology and placement: the data every policy produces and every consumer reads.
//
// A device holds `slots_per_device` (S) expert slots per MoE layer on average: its budget
// is S * L slots over all L layers, spent unevenly if a policy wants (more slots in a
// skewed layer, fewer in a flat one). A placement says, per layer, which logical expert
// each physical slot holds and which device the slot lives on. Devices are numbered
// node-major: device d is on node d / devices_per_node.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace moe::placement {

// Bounds on what a placement file or a topology may claim, so that sizes derived from them
// (device counts, per-device tables) cannot overflow or exhaust memory.
inline constexpr int64_t kMaxPlacementInt = 1 << 24;
inline constexpr int64_t kMaxDevices = 1 << 20;

struct Topology {
  int32_t nodes = 1;
  int32_t devices_per_node = 1;
  int32_t slots_per_device = 1;

  int32_t devices() const { return nodes * devices_per_node; }
  int32_t node_of(int32_t device) const { return device / devices_per_node; }
};

// Throws moe::Error unless every count is > 0, there are at most kMaxDevices devices, and
// the S * L * devices slots can hold all L * E experts once.
void check_topology(const Topology& topo, int64_t layers, int64_t experts);

struct LayerPlacement {
  std::vector<int32_t> slots;    // logical expert held by each physical slot
  std::vector<int32_t> devices;  // device of each physical slot
};

struct Placement {
  int32_t nodes = 1;
  int32_t devices_per_node = 1;
  int32_t slots_per_device = 0;  // 0: unknown (a file without it); budgets are then not checked
  std::vector<LayerPlacement> layers;

  int32_t devices() const { return nodes * devices_per_node; }
  Topology topology() const { return {nodes, devices_per_node, slots_per_device}; }
};

// "" when the placement is valid for `experts` logical experts per layer: slot and device
// lists of equal length, ids in range, every expert held at least once in every layer, and
// (when slots_per_device is known) no device over its S * L budget. Otherwise the first
// problem found, as a complete sentence.
std::string validate(const Placement& p, int64_t experts);
void check_placement(const Placement& p, int64_t experts, const std::string& source);

// Replicas per expert in one layer: i32 [experts].
std::vector<int32_t> replica_counts(const LayerPlacement& layer, int64_t experts);
// Slots each device holds over all layers: i32 [devices].
std::vector<int32_t> device_slot_totals(const Placement& p);

// The file format (docs/placement.md):
// {"nodes", "devices_per_node", "slots_per_device", "layers": [{"slots": [...], "devices": [...]}]}
nlohmann::json to_json(const Placement& p);
Placement placement_from_json(const nlohmann::json& j, const std::string& source);
// A placement file's text (untrusted); errors name `source`.
Placement parse_placement(const std::string& text, const std::string& source);
Placement read_placement(const std::string& path);
void write_placement(const std::string& path, const Placement& p);

}  // namespace moe::placement
