// moengine placement: synthetic load traces, expert placement plans (EPLB baseline and
// moengine's planner, full or incremental), their scores on unseen steps, a comparison
// table and a device-load heatmap.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "placement/eplb.h"
#include "placement/heatmap_svg.h"
#include "placement/incremental.h"
#include "placement/metrics.h"
#include "placement/moengine_planner.h"
#include "placement/trace_gen.h"

namespace moe::cli {
namespace {

using namespace moe::placement;

struct TopologyArgs {
  Topology topo{1, 1, 0};
  int32_t groups = 8;
};

void add_topology(CLI::App* cmd, TopologyArgs& t) {
  cmd->add_option("--nodes", t.topo.nodes, "Nodes in the expert-parallel group")->required();
  cmd->add_option("--devices-per-node", t.topo.devices_per_node, "Devices per node")->required();
  cmd->add_option("--slots-per-device", t.topo.slots_per_device, "Expert slots per device per layer (on average over layers)")->required();
  cmd->add_option("--groups", t.groups, "Expert groups (EPLB packs whole groups to nodes when they divide evenly)")->capture_default_str();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  if (!out) fail("{}: cannot open for writing", path);
  out << text;
  if (!out) fail("{}: write failed", path);
}

nlohmann::json metrics_json(const Metrics& m) {
  return {{"steps", m.steps},   {"balance", m.balance},           {"cost", m.cost},
          {"ideal", m.ideal},   {"gap", m.gap},                   {"remote_share", m.remote_share},
          {"layer_balance", m.layer_balance}, {"layer_slots", m.layer_slots}};
}

Placement plan(const std::string& algo, const Trace& trace, Window w, const TopologyArgs& t) {
  if (algo == "eplb") return plan_eplb(window_load(trace, w), t.topo, t.groups);
  PlannerOptions o;
  o.groups = t.groups;
  return plan_moengine(trace, w, t.topo, o);
}

// ---- gen-trace ----

void register_gen_trace(CLI::App& parent) {
  auto o = std::make_shared<TraceGenOptions>();
  auto out = std::make_shared<std::string>();
  CLI::App* cmd = parent.add_subcommand("gen-trace", "Write a synthetic expert-load trace, f32 [steps, layers, experts] .npy");
  cmd->footer(
      "Every token picks top-k distinct experts per layer from Zipf-like popularity over a\n"
      "drifting ranking (see docs/placement.md), so a layer's loads sum to tokens x top-k per step.\n"
      "Example (DeepSeek-V3 shape):\n"
      "  moengine placement gen-trace --steps 256 --layers 58 --experts 256 --top-k 8 --tokens 8192 \\\n"
      "      --skew 0.8 --skew-spread 0.6 --drift 0.0005 --burst 0.05 --correlation 0.5 --out trace.npy");
  cmd->add_option("--steps", o->steps, "Steps")->capture_default_str();
  cmd->add_option("--layers", o->layers, "MoE layers")->capture_default_str();
  cmd->add_option("--experts", o->experts, "Logical experts per layer")->capture_default_str();
  cmd->add_option("--top-k", o->top_k, "Experts per token")->capture_default_str();
  cmd->add_option("--tokens", o->tokens, "Tokens per step")->capture_default_str();
  cmd->add_option("--skew", o->skew, "Zipf exponent of expert popularity (0: uniform)")->capture_default_str();
  cmd->add_option("--skew-spread", o->skew_spread, "Per-layer exponent is skew x U(1-spread, 1+spread)")->capture_default_str();
  cmd->add_option("--drift", o->drift, "Share of the popularity ranking's latent variance renewed per step")->capture_default_str();
  cmd->add_option("--burst", o->burst, "Probability per step and layer that 1/32 of the experts burst")->capture_default_str();
  cmd->add_option("--burst-gain", o->burst_gain, "Popularity multiplier of bursting experts")->capture_default_str();
  cmd->add_option("--correlation", o->correlation, "Probability a token takes all its experts from its top groups")->capture_default_str();
  cmd->add_option("--groups", o->groups, "Expert groups (contiguous blocks) for --correlation")->capture_default_str();
  cmd->add_option("--groups-per-token", o->groups_per_token, "Groups a correlated token picks from")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Random seed")->capture_default_str();
  cmd->add_option("--out", *out, "Output .npy file")->required();
  cmd->callback([o, out] {
    const Trace trace = generate_trace(*o);
    write_trace(*out, trace);
    std::printf("wrote %s: [%lld, %lld, %lld]\n", out->c_str(), static_cast<long long>(trace.steps),
                static_cast<long long>(trace.layers), static_cast<long long>(trace.experts));
  });
}

// ---- plan ----

struct PlanArgs {
  std::string trace, window, algo = "moengine", from, out;
  TopologyArgs topo;
  int64_t max_moves = -1;
  double target_balance = 1.0;
  bool json = false;
};

void run_plan(const PlanArgs& a) {
  const Trace trace = read_trace(a.trace);
  const Window w = parse_window(a.window, "--window");
  check_window(trace, w, "--window");
  check_topology(a.topo.topo, trace.layers, trace.experts);
  if (a.algo != "eplb" && a.algo != "moengine") fail("--algo '{}': expected eplb or moengine", a.algo);
  if (!a.from.empty() && a.algo != "moengine") fail("--from (incremental mode) needs --algo moengine");
  if (a.from.empty() && a.max_moves >= 0) fail("--max-moves needs --from, the placement being served");
  const auto t0 = std::chrono::steady_clock::now();
  nlohmann::json report = {{"algo", a.algo}, {"window", {w.begin, w.end}}};
  Placement p;
  if (a.from.empty()) {
    p = plan(a.algo, trace, w, a.topo);
  } else {
    const Placement current = read_placement(a.from);
    check_placement(current, trace.experts, a.from);
    if (current.nodes != a.topo.topo.nodes || current.devices_per_node != a.topo.topo.devices_per_node) {
      fail("{}: placement is for {} x {} devices, the command line says {} x {}", a.from, current.nodes, current.devices_per_node,
           a.topo.topo.nodes, a.topo.topo.devices_per_node);
    }
    IncrementalOptions o;
    o.max_moves = a.max_moves;
    o.target_balance = a.target_balance;
    const IncrementalResult r = plan_incremental(window_load(trace, w), current, o);
    p = r.placement;
    if (p.slots_per_device == 0) p.slots_per_device = a.topo.topo.slots_per_device;
    report["moves"] = r.moves;
    report["window_balance_before"] = r.balance_before;
  }
  report["seconds"] = seconds_since(t0);
  check_placement(p, trace.experts, "planned placement");
  write_placement(a.out, p);
  const Metrics m = evaluate(trace, w, p);
  report["window_balance"] = m.balance;
  report["out"] = a.out;
  if (a.json) {
    std::printf("%s\n", report.dump().c_str());
    return;
  }
  std::printf("%s plan on steps %lld:%lld -> %s (%.1f ms)\n", a.algo.c_str(), static_cast<long long>(w.begin),
              static_cast<long long>(w.end), a.out.c_str(), 1e3 * report["seconds"].get<double>());
  if (report.contains("moves")) {
    std::printf("incremental: %lld expert copies, planning balance %.4f before\n", static_cast<long long>(report["moves"].get<int64_t>()),
                report["window_balance_before"].get<double>());
  }
  std::printf("balance on the planning window: %.4f\n", m.balance);
}

void register_plan(CLI::App& parent) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* cmd = parent.add_subcommand("plan", "Plan an expert placement from a window of a load trace");
  cmd->footer(
      "Examples:\n"
      "  moengine placement plan --trace trace.npy --window 0:32 --nodes 4 --devices-per-node 8 \\\n"
      "      --slots-per-device 9 --algo moengine --out placement.json\n"
      "  moengine placement plan --trace trace.npy --window 32:64 --nodes 4 --devices-per-node 8 \\\n"
      "      --slots-per-device 9 --from placement.json --max-moves 32 --out next.json\n"
      "--from runs the incremental mode: start from the placement being served and reach\n"
      "--target-balance (on the window's summed loads) with the fewest expert copies.");
  cmd->add_option("--trace", a->trace, "Load trace .npy [steps, layers, experts]")->required();
  cmd->add_option("--window", a->window, "Steps to plan from, A:B = steps A..B-1")->required();
  add_topology(cmd, a->topo);
  cmd->add_option("--algo", a->algo, "eplb or moengine")->capture_default_str();
  cmd->add_option("--from", a->from, "Current placement (incremental mode)");
  cmd->add_option("--max-moves", a->max_moves, "Incremental mode: expert copies allowed");
  cmd->add_option("--target-balance", a->target_balance, "Incremental mode: stop at this balance")->capture_default_str();
  cmd->add_option("--out", a->out, "Output placement JSON")->required();
  cmd->add_flag("--json", a->json, "Print a JSON report");
  cmd->callback([a] { run_plan(*a); });
}

// ---- eval ----

void register_eval(CLI::App& parent) {
  struct Args {
    std::string trace, window, placement;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = parent.add_subcommand("eval", "Score a placement on a window of a load trace");
  cmd->footer("Example:\n  moengine placement eval --trace trace.npy --window 32:64 --placement placement.json");
  cmd->add_option("--trace", a->trace, "Load trace .npy")->required();
  cmd->add_option("--window", a->window, "Steps to score on, A:B")->required();
  cmd->add_option("--placement", a->placement, "Placement JSON")->required();
  cmd->add_flag("--json", a->json, "Print the metrics as JSON");
  cmd->callback([a] {
    const Trace trace = read_trace(a->trace);
    const Window w = parse_window(a->window, "--window");
    const Placement p = read_placement(a->placement);
    check_placement(p, trace.experts, a->placement);
    const Metrics m = evaluate(trace, w, p);
    if (a->json) {
      std::printf("%s\n", metrics_json(m).dump().c_str());
      return;
    }
    std::printf("steps %lld:%lld, %d nodes x %d devices\n", static_cast<long long>(w.begin), static_cast<long long>(w.end), p.nodes,
                p.devices_per_node);
    std::printf("balance        %.4f  (mean device load / busiest, summed over steps and layers)\n", m.balance);
    std::printf("gap            %.2f%%  (cost above the lower bound of perfect balance)\n", 100 * m.gap);
    std::printf("remote share   %.4f  (expert visits whose token's node holds no replica)\n", m.remote_share);
    std::printf("layer balance  min %.4f, max %.4f\n", *std::min_element(m.layer_balance.begin(), m.layer_balance.end()),
                *std::max_element(m.layer_balance.begin(), m.layer_balance.end()));
    std::printf("layer  slots  balance\n");
    for (size_t l = 0; l < m.layer_balance.size(); ++l) std::printf("%5zu  %5d  %.4f\n", l, m.layer_slots[l], m.layer_balance[l]);
  });
}

// ---- compare ----

void register_compare(CLI::App& parent) {
  struct Args {
    std::string trace, svg;
    TopologyArgs topo;
    int64_t window = 32, windows = 0;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = parent.add_subcommand("compare", "Both algorithms over consecutive windows: plan on one, score on the next");
  cmd->footer(
      "Example:\n"
      "  moengine placement compare --trace trace.npy --nodes 4 --devices-per-node 8 --slots-per-device 9 \\\n"
      "      --window 32 --svg heatmap.svg");
  cmd->add_option("--trace", a->trace, "Load trace .npy")->required();
  add_topology(cmd, a->topo);
  cmd->add_option("--window", a->window, "Steps per window")->capture_default_str();
  cmd->add_option("--windows", a->windows, "Window pairs to run (default: all that fit)");
  cmd->add_option("--svg", a->svg, "Write a heatmap of device load per layer (eplb vs moengine, first pair's scoring window)");
  cmd->add_flag("--json", a->json, "Print the table as JSON");
  cmd->callback([a] {
    const Trace trace = read_trace(a->trace);
    check_topology(a->topo.topo, trace.layers, trace.experts);
    if (a->window <= 0) fail("--window {} must be > 0", a->window);
    int64_t pairs = trace.steps / a->window - 1;
    if (a->windows > 0) pairs = std::min(pairs, a->windows);
    if (pairs < 1) fail("{}: {} steps hold fewer than two windows of {}", a->trace, trace.steps, a->window);
    nlohmann::json rows = nlohmann::json::array();
    if (!a->json) {
      std::printf("| plan steps | score steps | eplb balance | moengine balance | gain (points) | eplb remote | moengine remote | eplb ms | moengine ms |\n");
      std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    }
    double sum_e = 0, sum_m = 0;
    for (int64_t k = 0; k < pairs; ++k) {
      const Window plan_w{k * a->window, (k + 1) * a->window}, score_w{(k + 1) * a->window, (k + 2) * a->window};
      auto t0 = std::chrono::steady_clock::now();
      const Placement pe = plan("eplb", trace, plan_w, a->topo);
      const double te = seconds_since(t0);
      t0 = std::chrono::steady_clock::now();
      const Placement pm = plan("moengine", trace, plan_w, a->topo);
      const double tm = seconds_since(t0);
      const Metrics me = evaluate(trace, score_w, pe), mm = evaluate(trace, score_w, pm);
      sum_e += me.balance, sum_m += mm.balance;
      rows.push_back({{"plan", {plan_w.begin, plan_w.end}}, {"score", {score_w.begin, score_w.end}}, {"eplb", metrics_json(me)},
                      {"moengine", metrics_json(mm)}, {"eplb_seconds", te}, {"moengine_seconds", tm}});
      if (!a->json) {
        std::printf("| %lld:%lld | %lld:%lld | %.4f | %.4f | %+.2f | %.3f | %.3f | %.1f | %.1f |\n", static_cast<long long>(plan_w.begin),
                    static_cast<long long>(plan_w.end), static_cast<long long>(score_w.begin), static_cast<long long>(score_w.end),
                    me.balance, mm.balance, 100 * (mm.balance - me.balance), me.remote_share, mm.remote_share, 1e3 * te, 1e3 * tm);
      }
      if (k == 0 && !a->svg.empty()) {
        const LoadMatrix load = window_load(trace, score_w);
        write_text(a->svg, heatmap_svg(fmt::format("{}: device load per layer, steps {}:{}", a->trace, score_w.begin, score_w.end),
                                       {heatmap_panel("eplb", load, pe), heatmap_panel("moengine", load, pm)}));
      }
    }
    if (a->json) {
      std::printf("%s\n", rows.dump().c_str());
      return;
    }
    std::printf("| mean | | %.4f | %.4f | %+.2f | | | | |\n", sum_e / double(pairs), sum_m / double(pairs), 100 * (sum_m - sum_e) / double(pairs));
  });
}

// ---- heatmap ----

void register_heatmap(CLI::App& parent) {
  struct Args {
    std::string trace, window, before, after, out;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = parent.add_subcommand("heatmap", "SVG heatmap of device load per layer for two placements");
  cmd->footer("Example:\n  moengine placement heatmap --trace trace.npy --window 32:64 --before eplb.json --after ours.json --out load.svg");
  cmd->add_option("--trace", a->trace, "Load trace .npy")->required();
  cmd->add_option("--window", a->window, "Steps whose summed load is drawn, A:B")->required();
  cmd->add_option("--before", a->before, "Placement JSON (left panel)")->required();
  cmd->add_option("--after", a->after, "Placement JSON (right panel)")->required();
  cmd->add_option("--out", a->out, "Output .svg")->required();
  cmd->callback([a] {
    const Trace trace = read_trace(a->trace);
    const Window w = parse_window(a->window, "--window");
    check_window(trace, w, "--window");
    const LoadMatrix load = window_load(trace, w);
    std::vector<HeatmapPanel> panels;
    for (const std::string& path : {a->before, a->after}) {
      const Placement p = read_placement(path);
      check_placement(p, trace.experts, path);
      if (int64_t(p.layers.size()) != trace.layers) fail("{}: {} layers, the trace has {}", path, p.layers.size(), trace.layers);
      panels.push_back(heatmap_panel(path, load, p));
    }
    write_text(a->out, heatmap_svg(fmt::format("device load per layer, steps {}:{}", w.begin, w.end), panels));
    std::printf("wrote %s\n", a->out.c_str());
  });
}

}  // namespace

void register_placement(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("placement", "Expert placement: synthetic traces, plans (eplb, moengine), scores, comparisons");
  cmd->require_subcommand(1);
  register_gen_trace(*cmd);
  register_plan(*cmd);
  register_eval(*cmd);
  register_compare(*cmd);
  register_heatmap(*cmd);
}

}  // namespace moe::cli
