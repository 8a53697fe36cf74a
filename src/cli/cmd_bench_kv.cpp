// moengine bench kv-transfer: the KV transports' read bandwidth against memcpy.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/progress.h"
#include "core/error.h"
#include "disagg/transfer_bench.h"

namespace moe::cli {
namespace {

struct BenchKvArgs {
  std::vector<std::string> methods{"ucx", "ucx-get", "tcp"};
  double seconds = 0.3;
  std::string json_out;
};

void run(const BenchKvArgs& a) {
  disagg::TransferBenchOptions o;
  o.methods.clear();
  for (const std::string& m : a.methods) o.methods.push_back(disagg::parse_transfer_method(m));
  if (!(a.seconds > 0)) fail("--seconds must be > 0, got {}", a.seconds);
  o.min_seconds = a.seconds;
  ProgressBar bar("bench kv-transfer");
  const size_t steps = o.sizes.size() * (1 + 2 * o.methods.size());
  size_t done = 0;
  const std::vector<disagg::TransferBenchRow> rows =
      disagg::run_transfer_bench(o, [&](const std::string& what) { bar.update(double(done++) / double(steps), what); });
  bar.done();

  std::map<uint64_t, double> memcpy_gbps;
  for (const auto& r : rows) {
    if (r.method == "memcpy") memcpy_gbps[r.bytes] = r.gbps;
  }
  std::printf("%-10s %-11s %9s %9s %11s\n", "size", "method", "GB/s", "x memcpy", "us/transfer");
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows) {
    const double ratio = r.gbps / memcpy_gbps[r.bytes];
    std::printf("%-10s %-11s %9.2f %9.2f %11.1f\n", fmt::format("{} KiB", r.bytes >> 10).c_str(), r.method.c_str(), r.gbps, ratio,
                r.seconds_per_transfer * 1e6);
    out.push_back({{"bytes", r.bytes}, {"method", r.method}, {"gbps", r.gbps}, {"vs_memcpy", ratio},
                   {"seconds_per_transfer", r.seconds_per_transfer}, {"reps", r.reps}});
  }
  if (!a.json_out.empty()) {
    std::ofstream f(a.json_out);
    if (!f) fail("cannot write {}", a.json_out);
    f << out.dump(2) << "\n";
  }
}

}  // namespace

void register_bench_kv_transfer(CLI::App& bench) {
  auto args = std::make_shared<BenchKvArgs>();
  CLI::App* cmd = bench.add_subcommand("kv-transfer", "Read bandwidth of the KV transports (ucx, ucx-get, tcp) against memcpy, 64 KiB to 64 MiB");
  cmd->footer(
      "Both sides run in this process over loopback: one transport serves a source buffer, another reads it.\n"
      "Each size is read as one contiguous range and as 36 KiB blocks taken from every other block of the source\n"
      "(a hand-off whose prompt blocks are not adjacent). ucx reads as a decode instance on the prefill\n"
      "instance's host does (it maps the source's memory); ucx-get forces UCX's one-sided gets, the path\n"
      "between hosts. Example:\n"
      "  moengine bench kv-transfer --transports ucx,ucx-get,tcp --json kv.json");
  cmd->add_option("--transports", args->methods, "Transfer methods to measure: ucx, ucx-get, tcp")->delimiter(',')->capture_default_str();
  cmd->add_option("--seconds", args->seconds, "Minimum time per measurement")->capture_default_str();
  cmd->add_option("--json", args->json_out, "Also write the rows as JSON to this file");
  cmd->callback([args] { run(*args); });
}

}  // namespace moe::cli
