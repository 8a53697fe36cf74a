#include "sim/expert_balance.h"

#include <algorithm>

#include "core/error.h"
#include "placement/eplb.h"
#include "placement/moengine_planner.h"
#include "placement/trace.h"
#include "placement/trace_gen.h"

namespace moe::sim {

ExpertBalance expert_balance(const ModelShape& model, const PoolConfig& pool, int32_t devices_per_node,
                             const std::string& trace_file, double skew, int64_t tokens_per_step, uint64_t seed) {
  const int64_t layers = model.moe_layers();
  ExpertBalance out;
  if (layers == 0) return out;
  if (pool.ep == 1) {
    out.imbalance.assign(size_t(layers), 1.0);
    out.planner = "single device";
    return out;
  }
  placement::Trace trace;
  if (!trace_file.empty()) {
    trace = placement::read_trace(trace_file);
    if (trace.layers != layers || trace.experts != model.experts)
      fail("{}: the expert-load trace has {} layers x {} experts; model {} has {} MoE layers x {} experts", trace_file,
           trace.layers, trace.experts, model.name, layers, model.experts);
    if (trace.steps < 2) fail("{}: the expert-load trace needs at least 2 steps (plan on half, score on half)", trace_file);
  } else {
    placement::TraceGenOptions g;
    g.steps = 8;
    g.layers = layers;
    g.experts = model.experts;
    g.top_k = int32_t(model.experts_per_token);
    g.tokens = std::clamp<int64_t>(tokens_per_step, 64, 8192);
    g.skew = skew;
    g.groups = int32_t(model.groups);
    g.groups_per_token = int32_t(model.groups_per_token);
    g.seed = seed;
    trace = placement::generate_trace(g);
  }
  const int32_t per_node = std::min(pool.ep, devices_per_node);
  placement::Topology topo;
  topo.devices_per_node = per_node;
  topo.nodes = (pool.ep + per_node - 1) / per_node;
  if (topo.nodes * per_node != pool.ep) fail("ep {} does not fill whole nodes of {} devices", pool.ep, devices_per_node);
  topo.slots_per_device = int32_t((model.experts + pool.redundant_experts) / pool.ep);
  const placement::Window plan_on{0, trace.steps / 2}, score_on{trace.steps / 2, trace.steps};
  placement::Placement placed;
  if (pool.placement == "eplb") {
    // EPLB's hierarchical mode needs the groups to divide over the nodes; else one group.
    const int32_t groups = model.groups % topo.nodes == 0 ? int32_t(model.groups) : 1;
    placed = placement::plan_eplb(placement::window_load(trace, plan_on), topo, groups);
  } else {
    placement::PlannerOptions o;
    o.groups = model.groups % topo.nodes == 0 ? int32_t(model.groups) : 1;
    placed = placement::plan_moengine(trace, plan_on, topo, o);
  }
  const placement::Metrics m = placement::evaluate(trace, score_on, placed);
  out.planner = pool.placement;
  out.balance = m.balance;
  for (double b : m.layer_balance) out.imbalance.push_back(b > 0 ? 1.0 / b : 1.0);
  return out;
}

}  // namespace moe::sim
