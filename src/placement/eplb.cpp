#include "placement/eplb.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace moe::placement {

Packing balanced_packing(const std::vector<double>& weight, int32_t packs) {
  const size_t n = weight.size();
  const size_t per_pack = n / size_t(packs);
  Packing out{std::vector<int32_t>(n, -1), std::vector<int32_t>(n, -1)};
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return weight[a] > weight[b]; });
  std::vector<double> pack_weight(size_t(packs), 0.0);
  std::vector<size_t> pack_items(size_t(packs), 0);
  for (size_t item : order) {
    size_t best = size_t(packs);
    for (size_t p = 0; p < size_t(packs); ++p) {
      if (pack_items[p] < per_pack && (best == size_t(packs) || pack_weight[p] < pack_weight[best])) best = p;
    }
    out.pack[item] = int32_t(best);
    out.rank[item] = int32_t(pack_items[best]++);
    pack_weight[best] += weight[item];
  }
  return out;
}

Replication replicate_experts(const std::vector<double>& weight, int32_t physical) {
  const int32_t logical = int32_t(weight.size());
  Replication r{std::vector<int32_t>(size_t(physical)), std::vector<int32_t>(size_t(logical), 1)};
  std::iota(r.phy2log.begin(), r.phy2log.begin() + logical, 0);
  for (int32_t i = logical; i < physical; ++i) {
    int32_t best = 0;
    for (int32_t e = 1; e < logical; ++e) {
      if (weight[size_t(e)] / r.count[size_t(e)] > weight[size_t(best)] / r.count[size_t(best)]) best = e;
    }
    r.phy2log[size_t(i)] = best;
    ++r.count[size_t(best)];
  }
  return r;
}

namespace {

// EPLB's hierarchical policy for one layer; nodes == 1 and groups == 1 is the global one.
LayerPlacement hierarchical(const double* load, int32_t E, int32_t groups, int32_t nodes, int32_t devices, int32_t S) {
  const int32_t group_size = E / groups, groups_per_node = groups / nodes;
  const int32_t per_node_log = E / nodes, per_node_phy = devices * S / nodes, devices_per_node = devices / nodes;

  std::vector<double> group_weight(size_t(groups), 0.0);
  for (int32_t e = 0; e < E; ++e) group_weight[size_t(e / group_size)] += load[e];
  const Packing to_nodes = balanced_packing(group_weight, nodes);
  // Node-major order of logical experts: node n owns positions n*E/nodes .. (n+1)*E/nodes-1.
  std::vector<int32_t> node_major(static_cast<size_t>(E));
  for (int32_t e = 0; e < E; ++e) {
    const int32_t g = e / group_size;
    node_major[size_t((to_nodes.pack[size_t(g)] * groups_per_node + to_nodes.rank[size_t(g)]) * group_size + e % group_size)] = e;
  }

  LayerPlacement out{std::vector<int32_t>(size_t(devices * S)), std::vector<int32_t>(size_t(devices * S))};
  for (int32_t n = 0; n < nodes; ++n) {
    std::vector<double> w(static_cast<size_t>(per_node_log));
    for (int32_t i = 0; i < per_node_log; ++i) w[size_t(i)] = load[node_major[size_t(n * per_node_log + i)]];
    const Replication rep = replicate_experts(w, per_node_phy);
    std::vector<double> per_replica(static_cast<size_t>(per_node_phy));
    for (int32_t i = 0; i < per_node_phy; ++i) {
      const int32_t m = rep.phy2log[size_t(i)];
      per_replica[size_t(i)] = w[size_t(m)] / rep.count[size_t(m)];
    }
    const Packing to_devices = balanced_packing(per_replica, devices_per_node);
    for (int32_t i = 0; i < per_node_phy; ++i) {
      const int32_t device = n * devices_per_node + to_devices.pack[size_t(i)];
      const size_t slot = size_t(device * S + to_devices.rank[size_t(i)]);
      out.slots[slot] = node_major[size_t(n * per_node_log + rep.phy2log[size_t(i)])];
      out.devices[slot] = device;
    }
  }
  return out;
}

}  // namespace

LayerPlacement eplb_layer(const double* load, int64_t experts, const Topology& topo, int32_t groups) {
  const int32_t E = int32_t(experts);
  if (groups > 0 && groups % topo.nodes == 0) {
    if (E % groups != 0) fail("eplb: {} experts do not split into {} equal groups (--groups)", E, groups);
    return hierarchical(load, E, groups, topo.nodes, topo.devices(), topo.slots_per_device);
  }
  return hierarchical(load, E, 1, 1, topo.devices(), topo.slots_per_device);
}

Placement plan_eplb(const LoadMatrix& load, const Topology& topo, int32_t groups) {
  check_topology(topo, load.layers, load.experts);
  Placement p{topo.nodes, topo.devices_per_node, topo.slots_per_device, {}};
  for (int64_t l = 0; l < load.layers; ++l) p.layers.push_back(eplb_layer(load.row(l), load.experts, topo, groups));
  return p;
}

}  // namespace moe::placement
