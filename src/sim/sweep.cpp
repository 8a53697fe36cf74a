#include "sim/sweep.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "sim/simulator.h"
#include "sim/svg_chart.h"

namespace moe::sim {

Vary parse_vary(const std::string& arg) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size())
    fail("--vary {}: expected KEY=V1,V2,... (e.g. deployment.decode.instances=1,2,4)", arg);
  Vary v;
  v.key = arg.substr(0, eq);
  std::stringstream in(arg.substr(eq + 1));
  for (std::string value; std::getline(in, value, ',');) {
    if (value.empty()) fail("--vary {}: an empty value", arg);
    v.values.push_back(value);
  }
  return v;
}

SweepResult sweep(const std::string& path, const std::vector<Vary>& varies, const ModelFileReader& reader,
                  const std::function<void(size_t, size_t)>& progress) {
  if (varies.empty() || varies.size() > 2) fail("sim sweep: give one or two --vary fields");
  SweepResult out;
  out.varies = varies;
  const YAML::Node base = load_config_tree(path);
  std::vector<std::vector<std::string>> combos;
  for (const std::string& a : varies[0].values) {
    if (varies.size() == 1) {
      combos.push_back({a});
      continue;
    }
    for (const std::string& b : varies[1].values) combos.push_back({a, b});
  }
  for (size_t i = 0; i < combos.size(); ++i) {
    YAML::Node tree = YAML::Clone(base);
    for (size_t k = 0; k < varies.size(); ++k) set_field(tree, varies[k].key, combos[i][k]);
    const SimConfig config = read_config(path, tree, reader);
    std::vector<TracedRequest> trace;
    if (!config.workload.arrival.trace_file.empty()) trace = read_request_trace(config.workload.arrival.trace_file);
    const SimResult result = simulate(config, trace);
    SweepRow row;
    row.values = combos[i];
    row.summary = summarize(config, result);
    row.json = to_json(config, result, row.summary);
    for (const PoolResult& p : result.pools) row.devices += p.devices;
    row.goodput_per_device = row.devices > 0 ? row.summary.goodput_rps / double(row.devices) : 0;
    out.rows.push_back(std::move(row));
    if (progress) progress(i + 1, combos.size());
  }
  for (size_t i = 1; i < out.rows.size(); ++i)
    if (out.rows[i].goodput_per_device > out.rows[out.best].goodput_per_device) out.best = i;
  return out;
}

std::string sweep_table(const SweepResult& r) {
  std::string out;
  for (const Vary& v : r.varies) out += fmt::format("{:>28} ", v.key);
  out += fmt::format("{:>8} {:>10} {:>12} {:>10} {:>10} {:>10} {:>10} {:>9}\n", "devices", "goodput", "per device",
                     "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "rejected");
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const SweepRow& row = r.rows[i];
    for (const std::string& v : row.values) out += fmt::format("{:>28} ", v);
    const Summary& s = row.summary;
    out += fmt::format("{:>8} {:>10.3f} {:>12.5f} {:>8.0f}ms {:>8.0f}ms {:>8.1f}ms {:>8.1f}ms {:>9}{}\n", row.devices,
                       s.goodput_rps, row.goodput_per_device, s.ttft_s.p50 * 1e3, s.ttft_s.p99 * 1e3, s.tpot_s.p50 * 1e3,
                       s.tpot_s.p99 * 1e3, s.rejected, i == r.best ? "  <- best per device" : "");
  }
  const SweepRow& best = r.rows[r.best];
  out += "best under the SLOs, per device:";
  for (size_t k = 0; k < r.varies.size(); ++k) out += fmt::format(" {}={}", r.varies[k].key, best.values[k]);
  out += fmt::format(" ({:.5f} req/s per device, {:.3f} req/s on {} devices)\n", best.goodput_per_device,
                     best.summary.goodput_rps, best.devices);
  return out;
}

nlohmann::json sweep_json(const SweepResult& r) {
  nlohmann::json j;
  for (const Vary& v : r.varies) j["vary"].push_back({{"key", v.key}, {"values", v.values}});
  for (const SweepRow& row : r.rows) {
    nlohmann::json e = row.json;
    e["values"] = row.values;
    e["goodput_rps_per_device"] = row.goodput_per_device;
    j["runs"].push_back(e);
  }
  j["best"] = r.best;
  return j;
}

void write_sweep_svgs(const SweepResult& r, const std::string& dir) {
  std::filesystem::create_directories(dir);
  auto number = [](const std::string& s, size_t i) {
    try {
      size_t used = 0;
      const double v = std::stod(s, &used);
      if (used == s.size()) return v;
    } catch (const std::exception&) {
    }
    return double(i);  // a non-numeric value (a policy name): its position
  };
  std::vector<Series> goodput;
  std::vector<Series> latency(4);
  latency[0].label = "TTFT p50 (ms)";
  latency[1].label = "TTFT p99 (ms)";
  latency[2].label = "TPOT p50 (ms)";
  latency[3].label = "TPOT p99 (ms)";
  const size_t inner = r.varies.size() == 2 ? r.varies[1].values.size() : 1;
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const SweepRow& row = r.rows[i];
    const size_t line = i % inner;
    if (goodput.size() <= line)
      goodput.push_back(Series{r.varies.size() == 2 ? fmt::format("{}={}", r.varies[1].key, row.values[1]) : "goodput", {}, {}});
    goodput[line].x.push_back(number(row.values[0], i / inner));
    goodput[line].y.push_back(row.summary.goodput_rps);
    const double load = row.summary.window_s > 0 ? double(row.summary.completed) / row.summary.window_s : 0;
    const double ys[] = {row.summary.ttft_s.p50, row.summary.ttft_s.p99, row.summary.tpot_s.p50, row.summary.tpot_s.p99};
    for (size_t k = 0; k < 4; ++k) {
      latency[k].x.push_back(load);
      latency[k].y.push_back(ys[k] * 1e3);
    }
  }
  for (Series& s : latency) {
    // Sorted by load, so the lines do not zigzag.
    std::vector<size_t> idx(s.x.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return s.x[a] < s.x[b]; });
    Series sorted{s.label, {}, {}};
    for (size_t i : idx) sorted.x.push_back(s.x[i]), sorted.y.push_back(s.y[i]);
    s = sorted;
  }
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream f(std::filesystem::path(dir) / name);
    if (!(f << text)) fail("{}/{}: cannot write", dir, name);
  };
  write("goodput.svg", line_chart_svg("Goodput under the SLOs", r.varies[0].key, "requests/s meeting the SLOs", goodput));
  write("latency.svg", line_chart_svg("Latency against load", "requests completed per second", "milliseconds", latency));
}

}  // namespace moe::sim
