#pragma once
// A deployment described in one YAML file (`moengine launch TOPOLOGY.yaml`): the model,
// the hosts, the engine instances (prefill, decode or unified, plain or expert-parallel
// groups, with their replicas) and the proxy in front of them. Parsing is pure: no file system access beyond reading the file, no
// processes; `moengine launch` runs what it describes and the proxy can read the same
// instance list. docs/deployment.md describes every field.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moe::launch {

enum class InstanceRole { kPrefill, kDecode, kBoth };
const char* role_name(InstanceRole role);  // "prefill", "decode", "both"

enum class RestartPolicy { kNever, kOnFailure };

// A random-weight model that `moengine gen-model` writes once into a cache folder, so that
// a topology runs on any machine without a download. Defaults are gen-model's own.
struct GeneratedModel {
  std::string arch = "deepseek2";
  std::string preset = "tiny";
  std::string type = "f32";
  uint64_t seed = 42;
  std::string cache_dir;  // empty: the user's cache folder (resolved by the launcher)
};

struct ModelSpec {
  std::string path;                        // a GGUF file or checkpoint folder; empty when generated
  std::optional<GeneratedModel> generate;  // set exactly when path is empty
  std::string served_name;                 // `--served-model-name`; empty: the file name without extension
  std::string where;                       // "FILE:LINE" of the model entry, for errors found later
};

// A machine of the deployment, from `hosts:`. Processes on a host that is not `local` are
// started over ssh (and EP ranks by mpirun, which uses ssh too); nothing but moengine has to
// be installed there.
struct HostSpec {
  std::string name;
  std::string address;  // what its processes listen on and the others reach them at
  bool local = false;   // the machine launch runs on: processes start directly
  std::string user;     // ssh login (empty: ssh's default)
  int ssh_port = 22;
  std::string identity;                  // ssh private key (empty: ssh's default)
  std::vector<std::string> ssh_options;  // more `ssh -o` options, "Key=Value"
  std::string model;                     // the model's path there (empty: the topology's)
  std::string workdir;                   // where its processes start (empty: the login's home)
  std::string binary = "moengine";       // moengine there
  std::string where;                     // "FILE:LINE" of the entry
};

// One engine instance as the proxy sees it: a plain `moengine serve`, or one rank of an
// expert-parallel group.
struct RankSpec {
  std::string name;     // the proxy's instance name: NAME for a plain instance, NAME-rankR in a group
  int host = -1;        // its host: an index into Topology::hosts; -1: the machine launch runs on
  std::string address;  // the address it listens on
  int port = 0;         // 0: a free port, chosen at the first start and kept across restarts
};

// One process launch starts, watches and restarts, defaults applied and replicas expanded
// (`count: 2` of `decode` gives `decode-0` and `decode-1`): a `moengine serve`, or the
// mpirun of an expert-parallel group whose ranks all go down and come back together.
struct InstanceSpec {
  std::string name;   // unique; the engine id and the log file's name
  std::string entry;  // the entry's own name, before expansion
  InstanceRole role = InstanceRole::kBoth;
  std::vector<RankSpec> ranks;  // one for a plain instance, `ep` for a group
  int ep = 0;                   // 0: one process; N: N ranks under mpirun (`serve --ep N`)
  std::vector<std::string> ep_args;      // --placement, --replace-interval-s, ... of the group
  std::vector<std::string> mpirun_args;  // more mpirun flags
  int threads = 0;  // per rank; 0: the launching machine's cores shared evenly among the ranks on it
  // ucx or tcp. Unified instances have one too: the proxy may run either leg of a
  // disaggregated request on them.
  std::string kv_transport = "ucx";
  std::string kv_cache_dtype = "auto";  // serve's --kv-cache-dtype
  std::string speculative_config;       // serve's --speculative-config (JSON); empty: none
  double weight = 1.0;  // share of traffic for the proxy's weighted policies, per rank
  std::vector<std::string> args;  // more `moengine serve` flags, after the defaults' args
  RestartPolicy restart = RestartPolicy::kNever;
  int max_restarts = 3;

  bool group() const { return ep > 0; }
};

struct ProxySpec {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: a free port
  std::string policy;     // empty: the proxy's default
  std::string api_key;    // empty: no key
  std::string admin_key;  // empty: no admin API
  std::vector<std::string> args;  // more `moengine proxy` flags
};

struct Topology {
  std::string file;  // as given, for messages
  ModelSpec model;
  std::vector<HostSpec> hosts;
  std::vector<InstanceSpec> instances;
  ProxySpec proxy;
  double ready_timeout_s = 120;  // from start to a healthy /health, per process
  double stop_timeout_s = 10;    // from SIGTERM to SIGKILL

  // The rank's host; null for the machine launch runs on.
  const HostSpec* host_of(const RankSpec& r) const { return r.host >= 0 ? &hosts[size_t(r.host)] : nullptr; }
  // Started over ssh: a rank on a host that is not local.
  bool remote(const RankSpec& r) const { return host_of(r) && !host_of(r)->local; }
  bool remote(const InstanceSpec& s) const;
};

// Throws moe::Error naming the file, the line and column, and the field of the first
// problem: YAML syntax, a missing or unknown key, a value of the wrong type or range, a
// name or fixed port (on one host) used twice, an unknown host, ranks that do not divide
// over their hosts, a prefill instance without a decode instance (or the reverse).
Topology parse_topology(const std::string& yaml_text, const std::string& file_name);
Topology load_topology(const std::string& path);

}  // namespace moe::launch
