// libFuzzer target for the files `moengine placement` reads: load traces (.npy) and
// placement JSON. The first byte picks the parser; the rest is the file. Every input must
// parse or throw moe::Error, and nothing may crash. What a parser lets through then runs the
// code behind it on a small scale: a trace is forecast and planned for, and a valid placement
// is scored and updated by incremental mode, so the checks at the door are the ones those
// need.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/npy.h"
#include "placement/forecast.h"
#include "placement/incremental.h"
#include "placement/metrics.h"
#include "placement/moengine_planner.h"
#include "placement/placement.h"
#include "placement/trace.h"

namespace {

using namespace moe::placement;

// A placement the planners produce must be valid: a moe::Error here is a bug, not bad input.
void must_be_valid(const Placement& p, int64_t experts, const char* who) {
  const std::string problem = validate(p, experts);
  if (problem.empty()) return;
  std::fprintf(stderr, "placement_fuzz: %s produced an invalid placement: %s\n", who, problem.c_str());
  std::abort();
}

void trace_input(std::string_view bytes) {
  const Trace trace = trace_from_npy(moe::parse_npy(bytes, "fuzz.npy"), "fuzz.npy");
  if (trace.steps > 64 || trace.layers > 8 || trace.experts > 64) return;
  const Window all{0, trace.steps};
  window_load(trace, all);
  forecast_load(trace, all);
  const Topology topo{1, 2, int32_t((trace.experts + 1) / 2 + 1)};
  must_be_valid(plan_moengine(trace, all, topo), trace.experts, "plan_moengine");
}

void placement_input(std::string_view bytes) {
  const Placement p = parse_placement(std::string(bytes), "fuzz.json");
  int32_t experts = 0;
  for (const LayerPlacement& layer : p.layers) {
    for (int32_t e : layer.slots) experts = std::max(experts, e + 1);
  }
  if (experts > 256 || p.layers.size() > 16 || !validate(p, experts).empty() || p.devices() > 64) return;
  const int64_t L = int64_t(p.layers.size());
  Trace trace{2, L, experts, {}};
  for (int64_t i = 0; i < 2 * L * experts; ++i) trace.load.push_back(float((i * 7919) % 13));
  evaluate(trace, {0, 2}, p);
  IncrementalOptions o;
  o.max_moves = 8;
  const IncrementalResult r = plan_incremental(window_load(trace, {1, 2}), p, o);
  must_be_valid(r.placement, experts, "plan_incremental");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] % 2 == 0) trace_input(body);
    else placement_input(body);
  } catch (const moe::Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "placement_fuzz: an exception other than moe::Error: %s\n", e.what());
    std::abort();
  }
  return 0;
}
