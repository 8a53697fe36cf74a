#pragma once
// The command lines `moengine launch` runs for a topology, each without the binary's path:
// {"serve", "--model", ...}. Kept apart from the supervisor so that `--dry-run` prints
// exactly what would run and tests can check them without starting anything.
#include <string>
#include <vector>

#include "launch/topology.h"

namespace moe::launch {

// $XDG_CACHE_HOME/moengine/models, else ~/.cache/moengine/models.
std::string default_model_cache_dir();

// CACHE/ARCH-PRESET-TYPE-seedSEED.gguf, CACHE being the entry's cache_dir or the default.
std::string generated_model_path(const GeneratedModel& g);
std::vector<std::string> gen_model_args(const GeneratedModel& g, const std::string& out);

// The model's `name`, else its file (or folder) name without the extension.
std::string served_model_name(const ModelSpec& model, const std::string& model_path);

// Threads per rank: the instance's own, else (on the launching machine) its cores shared
// evenly among the ranks that run there (at least one each); 0 on other hosts, which lets
// serve take all of that host's cores.
int instance_threads(const Topology& t, const InstanceSpec& s, unsigned cores);

// The engine id of an instance's n-th start: its name, then NAME-rN after restarts, so that
// decode instances never take a restarted prefill instance for the one they knew (whose
// KV transport address they keep). Ranks of a group add -rankR to it themselves.
std::string engine_id(const std::string& name, int restarts);

// The `moengine serve` arguments of an instance whose ranks listen on `ports` (one per rank:
// asked for, or learned at the first start; 0 picks a free one). A group gets --ep N and
// per-rank --host and --port lists. Instances that prefill (prefill and unified ones)
// publish their KV events on a free port of their host, for prefix-aware routing.
std::vector<std::string> serve_args(const InstanceSpec& s, const std::string& model_path, const std::string& served_name, int threads,
                                    const std::vector<int>& ports, const std::string& engine_id);

// Where and how an instance's process starts, beyond serve's own arguments.
struct ProcessContext {
  std::string self;        // this binary, for processes on the launching machine
  std::string model_path;  // the model on the launching machine (hosts may name their own)
  std::string served_name;
  std::string ssh_config;  // the file ssh_config_text is written to (an absolute path)
  bool as_root = false;    // mpirun refuses root unless told
  unsigned cores = 1;      // of the launching machine
};

// The whole command line (argv[0] the program): `SELF serve ...` on the launching machine,
// `ssh -F CONFIG -tt HOST 'cd DIR && exec BINARY serve ...'` on another host (the remote
// process ends with the connection), `mpirun ... BINARY serve ... --ep N` for a group
// (remote ranks started by mpirun over the same ssh config).
std::vector<std::string> process_argv(const Topology& t, const InstanceSpec& s, const ProcessContext& c, const std::vector<int>& ports,
                                      int restarts);

// The ssh client configuration of the topology's hosts that are not local (User, Port,
// IdentityFile, BatchMode and each host's ssh_options), under both each host's name and
// its address (mpirun names hosts by address). Empty when every host is local.
std::string ssh_config_text(const Topology& t);

// An instance's address as the proxy and the launcher reach it: a wildcard listening
// address (0.0.0.0, ::) becomes the loopback one.
std::string instance_url(const std::string& host, int port);

// The proxy's instances file (proxy/instances_file.h): one entry per rank, with its name,
// role, URL (`urls[i][r]` for rank r of `instances[i]`), weight and, for ranks of a group,
// the group's name.
std::string proxy_instances_file(const std::vector<InstanceSpec>& instances, const std::vector<std::vector<std::string>>& urls);

// The proxy reads its instances from `instances_file`; `--policy` only when the topology
// sets it. The proxy tokenizes prompts with the model's own tokenizer (`--tokenizer
// model_path`), which prefix-aware routing needs.
std::vector<std::string> proxy_args(const ProxySpec& p, const std::string& instances_file, const std::string& model_path);

// One command line as a shell would take it back (arguments quoted where needed).
std::string shell_line(const std::vector<std::string>& argv);

}  // namespace moe::launch
