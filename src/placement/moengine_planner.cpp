#include "placement/moengine_planner.h"

#include <algorithm>
#include <numeric>
#include <queue>

#include "core/error.h"
#include "placement/eplb.h"
#include "placement/forecast.h"
#include "placement/layer_state.h"
#include "placement/metrics.h"

namespace moe::placement {
namespace {

struct LayerHeap {
  std::priority_queue<std::pair<double, int32_t>> top;  // (share, expert)
  double mean = 0;
};

double estimate(double share, double mean, double granularity) { return std::max(share, mean + granularity * share); }

double next_gain(LayerHeap& h, const std::vector<int32_t>& copies, const double* load, int32_t devices, double granularity) {
  while (!h.top.empty() && copies[size_t(h.top.top().second)] >= devices) h.top.pop();
  if (h.top.empty()) return -1;
  const auto [share, e] = h.top.top();
  const double after = load[e] / (copies[size_t(e)] + 1);
  return estimate(share, h.mean, granularity) - estimate(after, h.mean, granularity);
}

LayerState pack_layer(const double* load, int64_t experts, const Topology& topo, const std::vector<int32_t>& copies, int32_t cap) {
  LayerState layer(load, experts, topo);
  layer.plan_copies(copies);
  std::vector<int32_t> items;
  for (int32_t e = 0; e < int32_t(experts); ++e) items.insert(items.end(), size_t(copies[size_t(e)]), e);
  std::stable_sort(items.begin(), items.end(), [&](int32_t a, int32_t b) { return layer.share(a) > layer.share(b); });
  const int32_t D = topo.devices();
  std::vector<uint8_t> node_holds(size_t(topo.nodes) * size_t(experts), 0);
  // Within this margin of the lightest device, a node without the expert wins.
  const double margin = 0.02 * layer.mean();
  for (int32_t e : items) {
    double lightest = -1;
    // Last resort: EPLB's equal split (step 1) may give an expert more replicas than there
    // are devices, and then one device holds two.
    for (int pass = 0; pass < 3; ++pass) {
      const bool capped = pass == 0, distinct = pass < 2;
      for (int32_t d = 0; d < D; ++d) {
        if ((distinct && layer.holds(d, e)) || (capped && layer.device_count(d) >= cap)) continue;
        if (lightest < 0 || layer.device_load(d) < lightest) lightest = layer.device_load(d);
      }
      if (lightest >= 0) {
        int32_t best = -1;
        bool best_new_node = false;
        for (int32_t d = 0; d < D; ++d) {
          if ((distinct && layer.holds(d, e)) || (capped && layer.device_count(d) >= cap) ||
              layer.device_load(d) > lightest + margin) {
            continue;
          }
          const bool new_node = !node_holds[size_t(topo.node_of(d)) * size_t(experts) + size_t(e)];
          if (best < 0 || (new_node && !best_new_node) ||
              (new_node == best_new_node && layer.device_load(d) < layer.device_load(best))) {
            best = d, best_new_node = new_node;
          }
        }
        layer.place(e, best);
        node_holds[size_t(topo.node_of(best)) * size_t(experts) + size_t(e)] = 1;
        break;
      }
    }
  }
  return layer;
}

// Step 4, first half: renumber devices per layer so that slot counts even out.
void even_out_counts(std::vector<LayerState>& layers, const Topology& topo, std::vector<int32_t>& totals) {
  const int32_t D = topo.devices(), N = topo.nodes, per = topo.devices_per_node;
  std::vector<size_t> order(layers.size());
  std::iota(order.begin(), order.end(), 0);
  auto spread = [&](size_t l) {
    int32_t lo = layers[l].device_count(0), hi = lo;
    for (int32_t d = 1; d < D; ++d) lo = std::min(lo, layers[l].device_count(d)), hi = std::max(hi, layers[l].device_count(d));
    return hi - lo;
  };
  std::vector<int32_t> spreads(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) spreads[l] = spread(l);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return spreads[a] > spreads[b]; });
  for (size_t l : order) {
    LayerState& layer = layers[l];
    std::vector<int64_t> virtual_count(size_t(N), 0), physical_total(size_t(N), 0);
    for (int32_t d = 0; d < D; ++d) {
      virtual_count[size_t(topo.node_of(d))] += layer.device_count(d);
      physical_total[size_t(topo.node_of(d))] += totals[size_t(d)];
    }
    std::vector<int32_t> vnodes(static_cast<size_t>(N)), pnodes(static_cast<size_t>(N));
    std::iota(vnodes.begin(), vnodes.end(), 0);
    std::iota(pnodes.begin(), pnodes.end(), 0);
    std::stable_sort(vnodes.begin(), vnodes.end(), [&](int32_t a, int32_t b) { return virtual_count[size_t(a)] > virtual_count[size_t(b)]; });
    std::stable_sort(pnodes.begin(), pnodes.end(), [&](int32_t a, int32_t b) { return physical_total[size_t(a)] < physical_total[size_t(b)]; });
    std::vector<int32_t> to(static_cast<size_t>(D));
    for (int32_t k = 0; k < N; ++k) {
      std::vector<int32_t> vd(static_cast<size_t>(per)), pd(static_cast<size_t>(per));
      for (int32_t i = 0; i < per; ++i) vd[size_t(i)] = vnodes[size_t(k)] * per + i, pd[size_t(i)] = pnodes[size_t(k)] * per + i;
      std::stable_sort(vd.begin(), vd.end(), [&](int32_t a, int32_t b) { return layer.device_count(a) > layer.device_count(b); });
      std::stable_sort(pd.begin(), pd.end(), [&](int32_t a, int32_t b) { return totals[size_t(a)] < totals[size_t(b)]; });
      for (int32_t i = 0; i < per; ++i) to[size_t(vd[size_t(i)])] = pd[size_t(i)];
    }
    layer.relabel(to);
    for (int32_t d = 0; d < D; ++d) totals[size_t(d)] += layer.device_count(d);
  }
}

// Step 4, second half: devices over budget hand single replicas to devices under it.
void repair_budgets(std::vector<LayerState>& layers, const Topology& topo, std::vector<int32_t>& totals) {
  const int32_t D = topo.devices();
  const int32_t budget = topo.slots_per_device * int32_t(layers.size());
  std::vector<double> peaks(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) peaks[l] = layers[l].peak();
  for (;;) {
    const int32_t a = int32_t(std::max_element(totals.begin(), totals.end()) - totals.begin());
    if (totals[size_t(a)] <= budget) return;
    double best_rise = 0, best_load = 0;
    size_t best_l = layers.size(), best_i = 0;
    int32_t best_b = -1;
    for (size_t l = 0; l < layers.size(); ++l) {
      const LayerState& layer = layers[l];
      for (size_t i = 0; i < layer.replicas().size(); ++i) {
        const Replica& r = layer.replicas()[i];
        if (r.device != a) continue;
        const double x = layer.item_load(i);
        for (int32_t b = 0; b < D; ++b) {
          if (totals[size_t(b)] >= budget || layer.holds(b, r.expert)) continue;
          const double rise = std::max(0.0, layer.device_load(b) + x - peaks[l]);
          if (best_l == layers.size() || rise < best_rise || (rise == best_rise && x < best_load)) {
            best_rise = rise, best_load = x, best_l = l, best_i = i, best_b = b;
          }
        }
      }
    }
    if (best_b < 0) fail("placement planner: device {} is over its {}-slot budget and no replica can leave it", a, budget);
    layers[best_l].move(best_i, best_b);
    peaks[best_l] = layers[best_l].peak();
    --totals[size_t(a)];
    ++totals[size_t(best_b)];
  }
}

// The peak of a quick list schedule (heaviest replica first onto the lightest device):
// a cheap, packing-aware estimate of a layer's cost under a replica plan.
double list_schedule_peak(const double* load, const std::vector<int32_t>& copies, int32_t devices) {
  std::vector<double> items;
  for (size_t e = 0; e < copies.size(); ++e) items.insert(items.end(), size_t(copies[e]), load[e] / copies[e]);
  std::sort(items.begin(), items.end(), std::greater<>());
  std::priority_queue<double, std::vector<double>, std::greater<>> lightest;
  for (int32_t d = 0; d < devices; ++d) lightest.push(0.0);
  double peak = 0;
  for (double x : items) {
    const double v = lightest.top() + x;
    lightest.pop();
    lightest.push(v);
    peak = std::max(peak, v);
  }
  return peak;
}

// The expert whose next replica (grow) or whose last spare replica (shrink) matters most / least.
int32_t expert_to_grow(const double* load, const std::vector<int32_t>& copies, int32_t devices) {
  int32_t best = -1;
  for (int32_t e = 0; e < int32_t(copies.size()); ++e) {
    if (copies[size_t(e)] < devices && (best < 0 || load[e] / copies[size_t(e)] > load[best] / copies[size_t(best)])) best = e;
  }
  return best;
}
int32_t expert_to_shrink(const double* load, const std::vector<int32_t>& copies) {
  int32_t best = -1;
  for (int32_t e = 0; e < int32_t(copies.size()); ++e) {
    if (copies[size_t(e)] > 1 && (best < 0 || load[e] / (copies[size_t(e)] - 1) < load[best] / (copies[size_t(best)] - 1))) best = e;
  }
  return best;
}

// Step 1's second half: the smooth estimate misjudges layers whose devices hold only one or
// two replicas, so spare slots then move between layers one at a time while the list
// schedule of the two layers together gets cheaper.
void refine_redundancy(const LoadMatrix& load, int32_t devices, std::vector<std::vector<int32_t>>& copies) {
  const size_t L = copies.size();
  std::vector<double> cost(L), gain(L), loss(L);
  auto refresh = [&](size_t l) {
    const double* w = load.row(int64_t(l));
    cost[l] = list_schedule_peak(w, copies[l], devices);
    std::vector<int32_t> c = copies[l];
    const int32_t g = expert_to_grow(w, c, devices);
    gain[l] = -1;
    if (g >= 0) {
      ++c[size_t(g)];
      gain[l] = cost[l] - list_schedule_peak(w, c, devices);
      --c[size_t(g)];
    }
    const int32_t s = expert_to_shrink(w, c);
    loss[l] = -1;
    if (s >= 0) {
      --c[size_t(s)];
      loss[l] = list_schedule_peak(w, c, devices) - cost[l];
    }
  };
  for (size_t l = 0; l < L; ++l) refresh(l);
  for (size_t round = 0; round < 8 * L; ++round) {
    size_t to = L, from = L;
    for (size_t l = 0; l < L; ++l) {
      if (gain[l] >= 0 && (to == L || gain[l] > gain[to])) to = l;
    }
    for (size_t l = 0; l < L; ++l) {
      if (l != to && loss[l] >= 0 && (from == L || loss[l] < loss[from])) from = l;
    }
    if (to == L || from == L || gain[to] <= loss[from] + 1e-9 * (cost[to] + cost[from])) return;
    ++copies[to][size_t(expert_to_grow(load.row(int64_t(to)), copies[to], devices))];
    --copies[from][size_t(expert_to_shrink(load.row(int64_t(from)), copies[from]))];
    refresh(to);
    refresh(from);
  }
}

}  // namespace

std::vector<std::vector<int32_t>> allocate_redundancy(const LoadMatrix& load, const Topology& topo, double granularity) {
  check_topology(topo, load.layers, load.experts);
  const int32_t D = topo.devices();
  std::vector<std::vector<int32_t>> copies(size_t(load.layers), std::vector<int32_t>(size_t(load.experts), 1));
  std::vector<LayerHeap> heaps(size_t(load.layers));
  std::priority_queue<std::pair<double, int64_t>> gains;
  for (int64_t l = 0; l < load.layers; ++l) {
    const double* w = load.row(l);
    double total = 0;
    for (int64_t e = 0; e < load.experts; ++e) {
      heaps[size_t(l)].top.emplace(w[e], int32_t(e));
      total += w[e];
    }
    heaps[size_t(l)].mean = total / D;
    const double g = next_gain(heaps[size_t(l)], copies[size_t(l)], w, D, granularity);
    if (g >= 0) gains.emplace(g, -l);
  }
  int64_t spare = int64_t(D) * topo.slots_per_device * load.layers - load.layers * load.experts;
  while (spare > 0 && !gains.empty()) {
    const int64_t l = -gains.top().second;
    gains.pop();
    LayerHeap& h = heaps[size_t(l)];
    const int32_t e = h.top.top().second;
    h.top.pop();
    const double* w = load.row(l);
    const int32_t n = ++copies[size_t(l)][size_t(e)];
    h.top.emplace(w[e] / n, e);
    --spare;
    const double g = next_gain(h, copies[size_t(l)], w, D, granularity);
    if (g >= 0) gains.emplace(g, -l);
  }
  refine_redundancy(load, D, copies);
  // Where every layer is about as skewed, EPLB's equal split is already right and the
  // estimate's misjudgements only cost; keep whichever the list schedule prefers.
  std::vector<std::vector<int32_t>> equal(size_t(load.layers));
  for (int64_t l = 0; l < load.layers; ++l) {
    const std::vector<double> w(load.row(l), load.row(l) + load.experts);
    equal[size_t(l)] = replicate_experts(w, D * topo.slots_per_device).count;
  }
  refine_redundancy(load, D, equal);
  double greedy_cost = 0, equal_cost = 0;
  for (int64_t l = 0; l < load.layers; ++l) {
    greedy_cost += list_schedule_peak(load.row(l), copies[size_t(l)], D);
    equal_cost += list_schedule_peak(load.row(l), equal[size_t(l)], D);
  }
  return equal_cost < greedy_cost ? equal : copies;
}

namespace {

// Step 1 counts experts at replica_load, steps 2-4 balance load.
Placement plan(const LoadMatrix& load, const LoadMatrix& replica_load, const Topology& topo, const PlannerOptions& options) {
  const std::vector<std::vector<int32_t>> copies = allocate_redundancy(replica_load, topo, options.granularity);
  const int32_t D = topo.devices();
  std::vector<LayerState> layers;
  for (int64_t l = 0; l < load.layers; ++l) {
    const int32_t slots = std::accumulate(copies[size_t(l)].begin(), copies[size_t(l)].end(), 0);
    // Two starts: the same per-device count everywhere (as EPLB), whose counts need no
    // evening out, and free counts; local search may then unbalance counts where it pays.
    const int32_t even = (slots + D - 1) / D, cap = 2 * even + 1;
    LayerState quota = pack_layer(load.row(l), load.experts, topo, copies[size_t(l)], even);
    improve_layer(quota, cap, true);
    LayerState free = pack_layer(load.row(l), load.experts, topo, copies[size_t(l)], cap);
    improve_layer(free, cap, true);
    layers.push_back(free.peak() < quota.peak() * (1.0 - 1e-9) ? std::move(free) : std::move(quota));
  }
  std::vector<int32_t> totals(size_t(D), 0);
  even_out_counts(layers, topo, totals);
  repair_budgets(layers, topo, totals);
  Placement p{topo.nodes, topo.devices_per_node, topo.slots_per_device, {}};
  for (LayerState& layer : layers) {
    improve_layer(layer, 0, false);
    p.layers.push_back(layer.placement());
  }
  return p;
}

}  // namespace

Placement plan_moengine(const LoadMatrix& load, const Topology& topo, const PlannerOptions& options) {
  Placement p = plan(load, load, topo, options);
  if (options.compare_with_eplb) {
    Placement base = plan_eplb(load, topo, options.groups);
    if (planning_cost(load, base) < planning_cost(load, p)) return base;
  }
  return p;
}

Placement plan_moengine(const Trace& trace, Window window, const Topology& topo, const PlannerOptions& options) {
  check_window(trace, window, "window");
  const LoadMatrix load = options.forecast ? forecast_load(trace, window) : window_load(trace, window);
  LoadMatrix replica_load = load;
  if (options.risk > 0) {
    const LoadMatrix deviation = forecast_deviation(trace, window, load);
    for (size_t i = 0; i < replica_load.load.size(); ++i) replica_load.load[i] += options.risk * deviation.load[i];
  }
  Placement p = plan(load, replica_load, topo, options);
  if (options.compare_with_eplb) {
    // EPLB fed the same forecast: a safety net for the packing, not for the forecast (which
    // loses to the window sum in sample by design, and wins out of sample).
    Placement base = plan_eplb(load, topo, options.groups);
    if (evaluate(trace, window, base).cost < evaluate(trace, window, p).cost) return base;
  }
  return p;
}

}  // namespace moe::placement
