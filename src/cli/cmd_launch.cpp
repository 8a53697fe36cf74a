// moengine launch: a whole deployment (instances and proxy) from one YAML file.
#include <fmt/format.h>

#include "cli/commands.h"
#include "launch/supervisor.h"
#include "launch/topology.h"

namespace moe::cli {
namespace {

struct LaunchArgs {
  std::string topology;
  std::string log_dir;
  bool dry_run = false;
};

}  // namespace

void register_launch(CLI::App& app) {
  auto args = std::make_shared<LaunchArgs>();
  CLI::App* cmd = app.add_subcommand("launch", "Start a whole deployment (instances and the proxy) from one YAML file, and supervise it");
  cmd->footer(
      "Examples:\n"
      "  moengine launch configs/1p1d.yaml\n"
      "  moengine launch configs/2p2d.yaml --log-dir /tmp/2p2d --dry-run\n"
      "A topology file (every field and its default: docs/deployment.md):\n"
      "  model:\n"
      "    generate: {arch: deepseek2, preset: tiny, type: q8_0, seed: 1}  # or: path: models/m.gguf\n"
      "    name: tiny                  # the model clients send (default: the file name)\n"
      "  defaults:                     # for every instance that does not say\n"
      "    threads: 1\n"
      "    kv_transport: ucx           # ucx or tcp\n"
      "    args: [--kv-cache-memory, 0.25]   # more `moengine serve` flags\n"
      "  instances:\n"
      "    - {name: prefill, role: prefill, count: 2}   # prefill-0, prefill-1 on free ports\n"
      "    - {name: decode, role: decode, port: 8200, restart: on-failure, max_restarts: 3}\n"
      "  proxy: {port: 8000, policy: cost, api_key: KEY}\n"
      "Instances start as `moengine serve` children, each in its own process group with its log in the\n"
      "log folder (default moengine-run/<time>/); once all answer /health the proxy starts in front of\n"
      "them. The endpoints are printed, then 'launch: ready on http://HOST:PORT' on stdout.\n"
      "SIGINT (Ctrl-C) or SIGTERM stops the proxy, then the instances (SIGTERM, then SIGKILL after\n"
      "timeouts.stop_s), and exits 0. An instance that dies is restarted on its port if its entry says\n"
      "restart: on-failure; otherwise, or if the proxy dies, everything stops and the exit status is 1.");
  cmd->add_option("TOPOLOGY", args->topology, "The topology file (YAML)")->required();
  cmd->add_option("--log-dir", args->log_dir, "Folder for the processes' logs (default: moengine-run/<time>/)");
  cmd->add_flag("--dry-run", args->dry_run, "Print the command lines it would run, and exit");
  cmd->callback([args] {
    const launch::Topology topology = launch::load_topology(args->topology);
    launch::LaunchOptions options;
    options.log_dir = args->log_dir;
    if (args->dry_run) {
      fmt::print("{}", launch::dry_run(topology, options));
      return;
    }
    launch::run_topology(topology, options);
  });
}

}  // namespace moe::cli
