#include "placement/incremental.h"

#include <algorithm>

#include "core/error.h"
#include "placement/metrics.h"

namespace moe::placement {
namespace {

constexpr size_t kLayersPerRound = 4;
constexpr size_t kVictims = 24;
constexpr size_t kTopDevices = 8;

// Load changes on a few devices of one layer.
struct Delta {
  std::vector<std::pair<int32_t, double>> change;  // (device, load difference)

  void clear() { change.clear(); }
  void add(int32_t d, double v) {
    for (auto& [dd, vv] : change) {
      if (dd == d) {
        vv += v;
        return;
      }
    }
    change.emplace_back(d, v);
  }
  bool touches(int32_t d) const {
    return std::any_of(change.begin(), change.end(), [&](const auto& c) { return c.first == d; });
  }
};

// A device may hold two replicas of one expert (EPLB's packing allows it), so lists change
// one entry at a time.
void erase_one(std::vector<int32_t>& v, int32_t x) { v.erase(std::find(v.begin(), v.end(), x)); }
void replace_one(std::vector<int32_t>& v, int32_t from, int32_t to) { *std::find(v.begin(), v.end(), from) = to; }

// One layer in the form incremental mode needs: who holds each expert, what each device
// holds, and the heaviest devices, so a candidate operation is scored in O(replicas of the
// experts it touches) rather than by recomputing the layer.
class Layer {
 public:
  Layer(const double* w, int64_t experts, int32_t devices, const LayerPlacement& placed)
      : w_(w), holders_(size_t(experts)), held_(size_t(devices)), load_(size_t(devices), 0.0) {
    for (size_t s = 0; s < placed.slots.size(); ++s) {
      holders_[size_t(placed.slots[s])].push_back(placed.devices[s]);
      held_[size_t(placed.devices[s])].push_back(placed.slots[s]);
    }
    double total = 0;
    for (int64_t e = 0; e < experts; ++e) {
      total += w[e];
      for (int32_t d : holders_[size_t(e)]) load_[size_t(d)] += share(int32_t(e));
    }
    mean_ = total / devices;
    refresh();
  }

  int32_t copies(int32_t e) const { return int32_t(holders_[size_t(e)].size()); }
  double share(int32_t e) const { return w_[e] / copies(e); }
  double expert_load(int32_t e) const { return w_[e]; }
  double device_load(int32_t d) const { return load_[size_t(d)]; }
  const std::vector<int32_t>& held(int32_t d) const { return held_[size_t(d)]; }
  const std::vector<int32_t>& holders(int32_t e) const { return holders_[size_t(e)]; }
  bool holds(int32_t d, int32_t e) const {
    const auto& h = holders_[size_t(e)];
    return std::find(h.begin(), h.end(), d) != h.end();
  }
  int32_t devices() const { return int32_t(load_.size()); }
  int32_t busiest() const { return top_.front().second; }
  double peak() const { return top_.front().first; }
  double mean() const { return mean_; }

  // e's replica count going from n to m: every current holder re-splits.
  void resplit(Delta& d, int32_t e, int32_t n, int32_t m) const {
    const double diff = w_[e] / m - w_[e] / n;
    for (int32_t h : holders_[size_t(e)]) d.add(h, diff);
  }
  // Adding a replica of e on device d / dropping e's replica from d (e keeps another).
  void grow(Delta& out, int32_t e, int32_t d) const {
    resplit(out, e, copies(e), copies(e) + 1);
    out.add(d, w_[e] / (copies(e) + 1));
  }
  void drop(Delta& out, int32_t e, int32_t d) const {
    resplit(out, e, copies(e), copies(e) - 1);
    out.add(d, -w_[e] / (copies(e) - 1));
  }

  double peak_after(const Delta& delta) const {
    double best = -1;
    for (const auto& [load, d] : top_) {
      if (!delta.touches(d)) {
        best = load;
        break;
      }
    }
    if (best < 0) {
      for (int32_t d = 0; d < devices(); ++d) {
        if (!delta.touches(d)) best = std::max(best, load_[size_t(d)]);
      }
    }
    for (const auto& [d, v] : delta.change) best = std::max(best, load_[size_t(d)] + v);
    return best;
  }

  // The heaviest load among devices other than a and b (-1: none).
  double peak_without(int32_t a, int32_t b) const {
    for (const auto& [load, d] : top_) {
      if (d != a && d != b) return load;
    }
    double best = 0;
    for (int32_t d = 0; d < devices(); ++d) {
      if (d != a && d != b) best = std::max(best, load_[size_t(d)]);
    }
    return best;
  }
  bool top_has(int32_t d) const {
    return std::any_of(top_.begin(), top_.end(), [&](const auto& t) { return t.second == d; });
  }

  void add(int32_t e, int32_t d) {
    Delta delta;
    grow(delta, e, d);
    apply(delta);
    holders_[size_t(e)].push_back(d);
    held_[size_t(d)].push_back(e);
    refresh();
  }
  void remove(int32_t e, int32_t d) {
    Delta delta;
    drop(delta, e, d);
    apply(delta);
    erase_one(holders_[size_t(e)], d);
    erase_one(held_[size_t(d)], e);
    refresh();
  }
  void swap(int32_t e, int32_t a, int32_t f, int32_t b) {
    Delta delta;
    delta.add(a, share(f) - share(e));
    delta.add(b, share(e) - share(f));
    apply(delta);
    replace_one(holders_[size_t(e)], a, b);
    replace_one(holders_[size_t(f)], b, a);
    replace_one(held_[size_t(a)], e, f);
    replace_one(held_[size_t(b)], f, e);
    refresh();
  }

  LayerPlacement placement() const {
    LayerPlacement out;
    for (int32_t d = 0; d < devices(); ++d) {
      for (int32_t e : held_[size_t(d)]) {
        out.slots.push_back(e);
        out.devices.push_back(d);
      }
    }
    return out;
  }

 private:
  void apply(const Delta& delta) {
    for (const auto& [d, v] : delta.change) load_[size_t(d)] += v;
  }
  void refresh() {
    top_.clear();
    for (int32_t d = 0; d < devices(); ++d) top_.emplace_back(load_[size_t(d)], d);
    const size_t k = std::min(kTopDevices, top_.size());
    std::partial_sort(top_.begin(), top_.begin() + std::ptrdiff_t(k), top_.end(), std::greater<>());
    top_.resize(k);
  }

  const double* w_;
  std::vector<std::vector<int32_t>> holders_;  // devices holding each expert
  std::vector<std::vector<int32_t>> held_;     // experts on each device
  std::vector<double> load_;
  double mean_ = 0;
  std::vector<std::pair<double, int32_t>> top_;  // (load, device), heaviest first
};

// A spare replica that could be given up, and how much its layer's peak grows without it.
struct Victim {
  double rise;
  size_t layer;
  int32_t expert, device;
};

void victims_of(const Layer& layer, size_t l, std::vector<Victim>& out) {
  out.clear();
  Delta delta;
  for (int32_t d = 0; d < layer.devices(); ++d) {
    for (int32_t e : layer.held(d)) {
      if (layer.copies(e) < 2) continue;
      delta.clear();
      layer.drop(delta, e, d);
      out.push_back({layer.peak_after(delta) - layer.peak(), l, e, d});
    }
  }
}

// The best exchange of a replica on the busiest device with a lighter one elsewhere in the
// layer; gain is per copy (a swap transfers two). A swap changes only a and b, so the rest
// of the layer peaks at the heaviest top device that is neither: each candidate is O(1).
struct Swap {
  double gain = 0;
  int32_t e = 0, f = 0, b = -1;
};

Swap best_swap(const Layer& layer) {
  Swap best;
  const int32_t a = layer.busiest();
  const double peak = layer.peak(), rest_a = layer.peak_without(a, -1);
  for (int32_t e : layer.held(a)) {
    const double x = layer.share(e);
    for (int32_t b = 0; b < layer.devices(); ++b) {
      const double lb = layer.device_load(b);
      if (b == a || lb >= peak || layer.holds(b, e)) continue;
      const double rest = layer.top_has(b) ? layer.peak_without(a, b) : rest_a;
      for (int32_t f : layer.held(b)) {
        const double y = layer.share(f);
        if (y >= x || layer.holds(a, f)) continue;
        const double gain = (peak - std::max({rest, peak - x + y, lb + x - y})) / 2;
        if (gain > best.gain) best = {gain, e, f, b};
      }
    }
  }
  return best;
}

}  // namespace

IncrementalResult plan_incremental(const LoadMatrix& load, const Placement& current, const IncrementalOptions& options) {
  check_placement(current, load.experts, "current placement");
  if (int64_t(current.layers.size()) != load.layers) {
    fail("the current placement has {} layers but the loads have {}", current.layers.size(), load.layers);
  }
  const size_t L = size_t(load.layers);
  std::vector<Layer> layers;
  layers.reserve(L);
  std::vector<std::vector<Victim>> victims(L);
  double ideal = 0, cost = 0;
  for (size_t l = 0; l < L; ++l) {
    layers.emplace_back(load.row(int64_t(l)), load.experts, current.devices(), current.layers[l]);
    victims_of(layers[l], l, victims[l]);
    ideal += layers[l].mean();
    cost += layers[l].peak();
  }
  IncrementalResult result;
  result.balance_before = cost > 0 ? ideal / cost : 1.0;
  const int64_t limit = options.max_moves < 0 ? INT64_MAX : options.max_moves;
  int64_t spent = 0;
  std::vector<size_t> hot(L);
  std::vector<Victim> cheap;
  std::vector<Swap> swaps(L);
  std::vector<bool> swap_known(L, false);
  Delta delta;

  while (spent < limit && cost > 0 && ideal / cost < options.target_balance) {
    for (size_t l = 0; l < L; ++l) hot[l] = l;
    const size_t n_hot = std::min(kLayersPerRound, L);
    std::partial_sort(hot.begin(), hot.begin() + std::ptrdiff_t(n_hot), hot.end(), [&](size_t a, size_t b) {
      return layers[a].peak() - layers[a].mean() > layers[b].peak() - layers[b].mean();
    });
    cheap.clear();
    for (const auto& v : victims) cheap.insert(cheap.end(), v.begin(), v.end());
    const size_t n_cheap = std::min(kVictims, cheap.size());
    std::partial_sort(cheap.begin(), cheap.begin() + std::ptrdiff_t(n_cheap), cheap.end(),
                      [](const Victim& a, const Victim& b) { return a.rise < b.rise; });
    cheap.resize(n_cheap);

    double best_gain = 1e-9 * cost;  // per copy
    enum { kNone, kReplicate, kSwap } best_kind = kNone;
    size_t best_layer = 0;
    int32_t best_e = 0, best_f = 0, best_b = 0;
    Victim best_victim{};
    for (size_t h = 0; h < n_hot; ++h) {
      const size_t l = hot[h];
      const Layer& layer = layers[l];
      const int32_t a = layer.busiest();
      if (spent + 1 <= limit) {
        for (int32_t e : layer.held(a)) {
          for (const Victim& v : cheap) {
            if (layer.holds(v.device, e) || (v.layer == l && v.expert == e)) continue;
            delta.clear();
            layer.grow(delta, e, v.device);
            double gain;
            if (v.layer == l) {
              layer.drop(delta, v.expert, v.device);
              gain = layer.peak() - layer.peak_after(delta);
            } else {
              gain = layer.peak() - layer.peak_after(delta) - v.rise;
            }
            if (gain > best_gain) best_gain = gain, best_kind = kReplicate, best_layer = l, best_e = e, best_victim = v;
          }
        }
      }
      if (spent + 2 > limit) continue;
      // A layer's best swap only changes when the layer does.
      if (!swap_known[l]) swaps[l] = best_swap(layer), swap_known[l] = true;
      if (swaps[l].b >= 0 && swaps[l].gain > best_gain) {
        best_gain = swaps[l].gain, best_kind = kSwap, best_layer = l;
        best_e = swaps[l].e, best_f = swaps[l].f, best_b = swaps[l].b;
      }
    }
    if (best_kind == kNone) break;
    Layer& layer = layers[best_layer];
    const bool other = best_kind == kReplicate && best_victim.layer != best_layer;
    const double before = layer.peak() + (other ? layers[best_victim.layer].peak() : 0.0);
    if (best_kind == kSwap) {
      layer.swap(best_e, layer.busiest(), best_f, best_b);
      spent += 2;
    } else {
      layers[best_victim.layer].remove(best_victim.expert, best_victim.device);
      layer.add(best_e, best_victim.device);
      spent += 1;
    }
    cost += layer.peak() + (other ? layers[best_victim.layer].peak() : 0.0) - before;
    victims_of(layer, best_layer, victims[best_layer]);
    swap_known[best_layer] = false;
    if (other) {
      victims_of(layers[best_victim.layer], best_victim.layer, victims[best_victim.layer]);
      swap_known[best_victim.layer] = false;
    }
  }

  result.placement = Placement{current.nodes, current.devices_per_node, current.slots_per_device, {}};
  for (const Layer& layer : layers) result.placement.layers.push_back(layer.placement());
  result.moves = count_moves(current, result.placement);
  result.balance_after = planning_balance(load, result.placement);
  return result;
}

}  // namespace moe::placement
