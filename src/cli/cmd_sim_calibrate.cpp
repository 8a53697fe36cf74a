// moengine sim calibrate: a hardware profile for this machine's CPU, fitted to `moengine
// bench model --json` results of a model file (src/sim/calibration.h says how).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/sim_model_file.h"
#include "core/error.h"
#include "sim/calibration.h"

namespace moe::cli {
namespace {

struct CalibrateArgs {
  std::string model;
  std::vector<std::string> bench;
  std::string kv_transfer;
  std::string kv_method = "ucx";
  std::string wake_metrics;
  std::string out;
  std::string name;
  bool print_precision = false;
};

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot read", path);
  std::stringstream s;
  s << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(s.str(), nullptr, false);
  if (j.is_discarded()) fail("{}: not valid JSON", path);
  return j;
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

void run(const CalibrateArgs& a) {
  namespace fs = std::filesystem;
  const std::string kind = fs::is_directory(a.model) ? "checkpoint" : "gguf";
  if (a.print_precision) {
    const sim::Precision p = read_model_precision(kind, a.model);
    std::printf("{weights: %s, activations: %s, kv_cache: %s}\n", p.weights.c_str(), p.activations.c_str(), p.kv_cache.c_str());
    return;
  }
  if (a.bench.empty()) fail("sim calibrate: --bench is required");
  sim::CalibrationInput in;
  in.model = read_model_file(kind, a.model);
  in.precision = read_model_precision(kind, a.model);
  in.name = !a.name.empty() ? a.name : fs::path(a.out).stem().string();
  in.cpu = sim::read_cpu_info();
  in.date = utc_now();
  for (const std::string& b : a.bench) in.runs.push_back(sim::parse_bench_model(b, read_json(b)));
  if (!a.kv_transfer.empty()) in.kv_link = sim::fit_kv_transfer(a.kv_transfer, read_json(a.kv_transfer), a.kv_method);
  if (!a.wake_metrics.empty()) {
    std::ifstream m(a.wake_metrics);
    if (!m) fail("{}: cannot read", a.wake_metrics);
    std::stringstream text;
    text << m.rdbuf();
    in.wake = sim::fit_wake(a.wake_metrics, text.str());
  }

  const sim::Calibration c = sim::calibrate(in);
  const sim::Hardware& h = c.hardware;
  const std::string gemm = in.precision.compute_type();
  std::string table = fmt::format("{:<28} {:<18} {:>12} {:>12} {:>8}\n", "bench", "measurement", "measured ms", "predicted ms", "error");
  for (const sim::FitRow& r : c.rows)
    table += fmt::format("{:<28} {:<18} {:>12.3f} {:>12.3f} {:>+7.1f}%\n", fs::path(r.run).filename().string(), r.label,
                         r.measured_s * 1e3, r.predicted_s * 1e3, 100 * r.error());
  const std::string figures = fmt::format(
      "{}: {}\n"
      "model {} (weights {}, activations {}, KV {}); {} evaluations, rms log error {:.1f}%\n"
      "{} GEMMs {:.1f} GOP/s ({:.0f} peak x {:.3f}); f32 attention {:.1f} GFLOP/s ({:.0f} peak x {:.3f})\n"
      "memory {:.1f} GB/s x {:.3f} (weights), x {:.3f} (attention KV reads)\n"
      "overhead {:.2f} us per layer, {:.1f} us per step, {:.1f} us to wake; KV link {:.2f} GB/s + {:.1f} us\n",
      h.name, h.description, in.model.name, in.precision.weights, in.precision.activations, in.precision.kv_cache, c.evaluations,
      100 * c.rms_log_error, gemm, h.flops.at(gemm) * h.efficiency.gemm / 1e9, h.flops.at(gemm) / 1e9, h.efficiency.gemm,
      h.flops.at("f32") * h.efficiency.attention_compute / 1e9, h.flops.at("f32") / 1e9, h.efficiency.attention_compute,
      h.mem_bw / 1e9, h.efficiency.memory, h.efficiency.attention_memory, h.layer_overhead_s * 1e6, h.step_overhead_s * 1e6,
      h.wake_s * 1e6, h.scale_up.bw / 1e9, h.scale_up.latency_s * 1e6);
  std::fputs((figures + table).c_str(), stdout);
  if (!a.out.empty()) {
    if (fs::path(a.out).has_parent_path()) fs::create_directories(fs::path(a.out).parent_path());
    std::ofstream out(a.out);
    const std::string comment = "Written by `moengine sim calibrate` on " + in.date + ".\n" + figures + "\n" + table;
    if (!(out << sim::hardware_yaml(c, comment))) fail("{}: cannot write", a.out);
    std::fprintf(stderr, "sim calibrate: wrote %s\n", a.out.c_str());
  }
}

}  // namespace

CLI::App* register_sim_calibrate(CLI::App& sim) {
  auto args = std::make_shared<CalibrateArgs>();
  CLI::App* cmd = sim.add_subcommand("calibrate", "Fit a hardware profile of this machine's CPU to `bench model` results");
  cmd->footer(
      "The cost model's step times (the simulator's own) are fitted to the measured ones: pp runs\n"
      "(one prefill), tg runs (decode steps of one sequence) and --batch runs (B sequences at\n"
      "--batch-context). Give runs of one thread count; a profile is one device.\n"
      "Example:\n"
      "  moengine bench model --model models/mid-q8_0.gguf --pp 128 --tg 64 --threads 2 --batch 1,4,16 --json > a.json\n"
      "  moengine bench model --model models/mid-q8_0.gguf --pp 512 --tg 64 --threads 2 --batch 1,4,16 \\\n"
      "      --batch-context 512 --json > b.json\n"
      "  moengine bench kv-transfer --transports ucx,tcp --json kv.json\n"
      "  moengine sim calibrate --model models/mid-q8_0.gguf --bench a.json --bench b.json --kv-transfer kv.json \\\n"
      "      --out configs/sim/hardware/cpu-local.yaml");
  cmd->add_option("--model", args->model, "The model file the benches ran (GGUF file or checkpoint directory)")->required();
  cmd->add_option("--bench", args->bench, "A `bench model --json` result (repeat for more)");
  cmd->add_option("--kv-transfer", args->kv_transfer, "A `bench kv-transfer --json` result: the KV link between instances");
  cmd->add_option("--kv-method", args->kv_method, "Its transport: ucx or tcp (the 'blocks' rows where there are)")->capture_default_str();
  cmd->add_option("--wake-metrics", args->wake_metrics,
                  "A `moengine serve` /metrics page taken after requests sent one at a time: its mean queue time is "
                  "overhead.wake_us, how long an idle engine takes to start a step for new work");
  cmd->add_option("--out", args->out, "Write the profile here (configs/sim/hardware/NAME.yaml)");
  cmd->add_option("--name", args->name, "The profile's name (default: --out's file name)");
  cmd->add_flag("--print-precision", args->print_precision,
                 "Only print the precision the engine serves --model in, as a sim config's `precision:` value");
  cmd->callback([args] { run(*args); });
  return cmd;
}

}  // namespace moe::cli
