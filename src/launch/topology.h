#pragma once
// A deployment described in one YAML file (`moengine launch TOPOLOGY.yaml`): the model,
// the engine instances (prefill, decode or unified, with their replicas) and the proxy in
// front of them. Parsing is pure: no file system access beyond reading the file, no
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

// One engine instance, defaults applied and replicas expanded: `count: 2` of `decode`
// gives `decode-0` and `decode-1`.
struct InstanceSpec {
  std::string name;   // unique; the engine id and the log file's name
  std::string group;  // the entry's own name, before expansion
  InstanceRole role = InstanceRole::kBoth;
  std::string host = "127.0.0.1";
  int port = 0;     // 0: a free port, chosen at start and kept across restarts
  int threads = 0;  // 0: the machine's cores shared evenly among the instances
  // ucx or tcp. Unified instances have one too: the proxy may run either leg of a
  // disaggregated request on them.
  std::string kv_transport = "ucx";
  double weight = 1.0;  // share of traffic for the proxy's weighted policies
  std::vector<std::string> args;  // more `moengine serve` flags, after the defaults' args
  RestartPolicy restart = RestartPolicy::kNever;
  int max_restarts = 3;
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
  std::vector<InstanceSpec> instances;
  ProxySpec proxy;
  double ready_timeout_s = 120;  // from start to a healthy /health, per process
  double stop_timeout_s = 10;    // from SIGTERM to SIGKILL
};

// Throws moe::Error naming the file, the line and column, and the field of the first
// problem: YAML syntax, a missing or unknown key, a value of the wrong type or range, a
// name or fixed port used twice, a prefill instance without a decode instance (or the
// reverse).
Topology parse_topology(const std::string& yaml_text, const std::string& file_name);
Topology load_topology(const std::string& path);

}  // namespace moe::launch
