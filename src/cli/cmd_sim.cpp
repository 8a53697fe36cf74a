// moengine sim: the cluster simulator (docs/simulator.md). One run of a deployment file, or
// a sweep over one or two of its fields.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "cli/sim_model_file.h"
#include "core/error.h"
#include "sim/results.h"
#include "sim/simulator.h"
#include "sim/svg_chart.h"
#include "sim/sweep.h"

namespace moe::cli {
namespace {

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  if (!(out << text)) fail("{}: cannot write", path);
}

std::vector<sim::TracedRequest> trace_of(const sim::SimConfig& c) {
  if (c.workload.arrival.trace_file.empty()) return {};
  return sim::read_request_trace(c.workload.arrival.trace_file);
}

// Per-request latency over the run: TTFT and TPOT against arrival time.
void write_run_svgs(const sim::SimResult& r, const std::string& dir) {
  std::filesystem::create_directories(dir);
  sim::Series ttft{"TTFT (ms)", {}, {}}, tpot{"TPOT (ms)", {}, {}};
  for (const sim::SimRequest& q : r.requests) {
    if (q.finish_s < 0) continue;
    ttft.x.push_back(q.spec.arrival_s);
    ttft.y.push_back((q.first_token_s - q.spec.arrival_s) * 1e3);
    if (q.spec.output_tokens > 1) {
      tpot.x.push_back(q.spec.arrival_s);
      tpot.y.push_back((q.finish_s - q.first_token_s) / double(q.spec.output_tokens - 1) * 1e3);
    }
  }
  write_file((std::filesystem::path(dir) / "ttft.svg").string(),
             sim::line_chart_svg("Time to first token, by arrival", "arrival (s)", "ms", {ttft}));
  write_file((std::filesystem::path(dir) / "tpot.svg").string(),
             sim::line_chart_svg("Time per output token, by arrival", "arrival (s)", "ms", {tpot}));
}

}  // namespace

void register_sim(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("sim", "Simulate a deployment (xPyD pools of expert-parallel groups) under a workload");
  cmd->footer(
      "A discrete-event simulation of the whole serving system: the proxy's real routing\n"
      "policies, the engine's own batch scheduler, the placement planner's expert balance, and\n"
      "step times from a cost model of the hardware (configs/sim/, docs/simulator.md).\n"
      "Examples:\n"
      "  moengine sim --config configs/sim/deepseek-v3-h800.yaml --json out.json\n"
      "  moengine sim sweep --config configs/sim/deepseek-v3-h800.yaml \\\n"
      "      --vary workload.arrival.poisson=150,200,250 --svg sweep-svg");
  auto config = std::make_shared<std::string>();
  auto json = std::make_shared<std::string>();
  auto svg = std::make_shared<std::string>();
  cmd->add_option("--config", *config, "The deployment and workload, YAML (docs/simulator.md)");
  cmd->add_option("--json", *json, "Also write the results as JSON to this file ('-': stdout, instead of the table)");
  cmd->add_option("--svg", *svg, "Write charts of latency over the run into this directory");

  CLI::App* calibrate = register_sim_calibrate(*cmd);
  CLI::App* sw = cmd->add_subcommand("sweep", "Simulate once per value of one or two fields; the best per device under the SLOs");
  auto sw_config = std::make_shared<std::string>();
  auto varies = std::make_shared<std::vector<std::string>>();
  auto sw_json = std::make_shared<std::string>();
  auto sw_svg = std::make_shared<std::string>();
  sw->add_option("--config", *sw_config, "The base configuration")->required();
  sw->add_option("--vary", *varies, "KEY=V1,V2,...: a field's dotted path and its values (once or twice)")->required();
  sw->add_option("--json", *sw_json, "Also write every run's results as JSON to this file");
  sw->add_option("--svg", *sw_svg, "Write goodput.svg and latency.svg into this directory");
  sw->footer(
      "Fields are paths in the config file, e.g. deployment.decode.instances,\n"
      "deployment.prefill.redundant_experts, deployment.policy, workload.arrival.poisson,\n"
      "deployment.decode.max_sequences_per_device. Example:\n"
      "  moengine sim sweep --config configs/sim/qwen3-30b-h100.yaml --vary deployment.policy=round_robin,cost \\\n"
      "      --vary workload.arrival.poisson=20,40");
  sw->callback([=] {
    std::vector<sim::Vary> v;
    for (const std::string& a : *varies) v.push_back(sim::parse_vary(a));
    const sim::SweepResult r = sim::sweep(*sw_config, v, read_model_file, [](size_t done, size_t total) {
      std::fprintf(stderr, "\rsweep: %zu/%zu runs", done, total);
      if (done == total) std::fprintf(stderr, "\n");
    });
    std::fputs(sim::sweep_table(r).c_str(), stdout);
    if (!sw_json->empty()) write_file(*sw_json, sim::sweep_json(r).dump(2) + "\n");
    if (!sw_svg->empty()) sim::write_sweep_svgs(r, *sw_svg);
  });

  cmd->callback([=] {
    if (cmd->got_subcommand(sw) || cmd->got_subcommand(calibrate)) return;
    if (config->empty()) fail("sim: --config is required (or use `moengine sim sweep`)");
    const sim::SimConfig c = sim::read_config(*config, read_model_file);
    const sim::SimResult r = sim::simulate(c, trace_of(c));
    const sim::Summary s = sim::summarize(c, r);
    const nlohmann::json j = sim::to_json(c, r, s);
    if (*json == "-") {
      std::fputs((j.dump(2) + "\n").c_str(), stdout);
    } else {
      std::fputs(sim::to_table(c, r, s).c_str(), stdout);
      if (!json->empty()) write_file(*json, j.dump(2) + "\n");
    }
    if (!svg->empty()) write_run_svgs(r, *svg);
  });
}

}  // namespace moe::cli
