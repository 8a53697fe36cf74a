#include "placement/placement.h"

#include <fmt/format.h>

#include <fstream>
#include <iterator>

#include "core/error.h"

namespace moe::placement {

namespace {

// "" unless nodes x devices_per_node is over kMaxDevices (computed without overflow).
std::string too_many_devices(int32_t nodes, int32_t devices_per_node) {
  if (int64_t(nodes) * devices_per_node <= kMaxDevices) return "";
  return fmt::format("{} x {} devices, more than {}", nodes, devices_per_node, kMaxDevices);
}

}  // namespace

void check_topology(const Topology& topo, int64_t layers, int64_t experts) {
  if (layers <= 0 || experts <= 0) fail("topology: layers ({}) and experts ({}) must be > 0", layers, experts);
  if (topo.nodes <= 0 || topo.devices_per_node <= 0 || topo.slots_per_device <= 0) {
    fail("topology: nodes ({}), devices per node ({}) and slots per device ({}) must all be > 0", topo.nodes,
         topo.devices_per_node, topo.slots_per_device);
  }
  if (const std::string problem = too_many_devices(topo.nodes, topo.devices_per_node); !problem.empty()) {
    fail("topology: {}", problem);
  }
  if (int64_t(topo.devices()) * topo.slots_per_device < experts) {
    fail("topology: {} devices x {} slots = {} slots per layer cannot hold each of the {} experts once; "
         "need at least {} slots per device",
         topo.devices(), topo.slots_per_device, int64_t(topo.devices()) * topo.slots_per_device, experts,
         (experts + topo.devices() - 1) / topo.devices());
  }
}

std::vector<int32_t> replica_counts(const LayerPlacement& layer, int64_t experts) {
  std::vector<int32_t> n(size_t(experts), 0);
  for (int32_t e : layer.slots) {
    if (e >= 0 && e < experts) ++n[size_t(e)];
  }
  return n;
}

std::vector<int32_t> device_slot_totals(const Placement& p) {
  std::vector<int32_t> n(size_t(std::max(p.devices(), 0)), 0);
  for (const LayerPlacement& layer : p.layers) {
    for (int32_t d : layer.devices) {
      if (d >= 0 && d < p.devices()) ++n[size_t(d)];
    }
  }
  return n;
}

std::string validate(const Placement& p, int64_t experts) {
  if (p.nodes <= 0 || p.devices_per_node <= 0) {
    return fmt::format("nodes ({}) and devices_per_node ({}) must be > 0", p.nodes, p.devices_per_node);
  }
  if (std::string problem = too_many_devices(p.nodes, p.devices_per_node); !problem.empty()) return problem;
  if (p.slots_per_device < 0) return fmt::format("slots_per_device ({}) must be >= 0", p.slots_per_device);
  if (p.layers.empty()) return "the placement has no layers";
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const LayerPlacement& layer = p.layers[l];
    if (layer.slots.size() != layer.devices.size()) {
      return fmt::format("layer {} has {} slots but {} devices", l, layer.slots.size(), layer.devices.size());
    }
    for (size_t s = 0; s < layer.slots.size(); ++s) {
      if (layer.slots[s] < 0 || layer.slots[s] >= experts) {
        return fmt::format("layer {} slot {} holds expert {}, outside 0..{}", l, s, layer.slots[s], experts - 1);
      }
      if (layer.devices[s] < 0 || layer.devices[s] >= p.devices()) {
        return fmt::format("layer {} slot {} is on device {}, outside 0..{}", l, s, layer.devices[s], p.devices() - 1);
      }
    }
    const std::vector<int32_t> n = replica_counts(layer, experts);
    for (int64_t e = 0; e < experts; ++e) {
      if (n[size_t(e)] == 0) return fmt::format("layer {} holds no replica of expert {}", l, e);
    }
  }
  if (p.slots_per_device > 0) {
    const int64_t budget = int64_t(p.slots_per_device) * int64_t(p.layers.size());
    const std::vector<int32_t> totals = device_slot_totals(p);
    for (size_t d = 0; d < totals.size(); ++d) {
      if (totals[d] > budget) {
        return fmt::format("device {} holds {} slots, over its budget of {} ({} per layer x {} layers)", d, totals[d], budget,
                           p.slots_per_device, p.layers.size());
      }
    }
  }
  return "";
}

void check_placement(const Placement& p, int64_t experts, const std::string& source) {
  const std::string problem = validate(p, experts);
  if (!problem.empty()) fail("{}: invalid placement: {}", source, problem);
}

nlohmann::json to_json(const Placement& p) {
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerPlacement& layer : p.layers) layers.push_back({{"slots", layer.slots}, {"devices", layer.devices}});
  return {{"nodes", p.nodes}, {"devices_per_node", p.devices_per_node}, {"slots_per_device", p.slots_per_device}, {"layers", layers}};
}

namespace {

// Counts and ids in 0..kMaxPlacementInt; larger values would be cut short in 32 bits.
bool in_range(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= uint64_t(kMaxPlacementInt);
  return v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= kMaxPlacementInt;
}

int32_t int_field(const nlohmann::json& j, const char* key, const std::string& source, bool required) {
  if (!j.contains(key)) {
    if (required) fail("{}: placement has no \"{}\"", source, key);
    return 0;
  }
  if (!in_range(j[key])) fail("{}: \"{}\" must be an integer in 0..{}", source, key, kMaxPlacementInt);
  return j[key].get<int32_t>();
}

std::vector<int32_t> int_list(const nlohmann::json& layer, const char* key, size_t l, const std::string& source) {
  if (!layer.contains(key) || !layer[key].is_array()) fail("{}: layers[{}] needs an array \"{}\"", source, l, key);
  std::vector<int32_t> out;
  for (const nlohmann::json& v : layer[key]) {
    if (!in_range(v)) fail("{}: layers[{}].{} must hold integers in 0..{}", source, l, key, kMaxPlacementInt);
    out.push_back(v.get<int32_t>());
  }
  return out;
}

}  // namespace

Placement placement_from_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) fail("{}: a placement is a JSON object", source);
  Placement p;
  p.nodes = int_field(j, "nodes", source, true);
  p.devices_per_node = int_field(j, "devices_per_node", source, true);
  p.slots_per_device = int_field(j, "slots_per_device", source, false);
  if (!j.contains("layers") || !j["layers"].is_array()) fail("{}: placement needs an array \"layers\"", source);
  for (size_t l = 0; l < j["layers"].size(); ++l) {
    const nlohmann::json& layer = j["layers"][l];
    if (!layer.is_object()) fail("{}: layers[{}] must be an object", source, l);
    p.layers.push_back({int_list(layer, "slots", l, source), int_list(layer, "devices", l, source)});
  }
  return p;
}

Placement parse_placement(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", source, e.what());
  }
  return placement_from_json(j, source);
}

Placement read_placement(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_placement(text, path);
}

void write_placement(const std::string& path, const Placement& p) {
  std::ofstream out(path);
  if (!out) fail("{}: cannot open for writing", path);
  out << to_json(p).dump() << '\n';
  if (!out) fail("{}: write failed", path);
}

}  // namespace moe::placement
