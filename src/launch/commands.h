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

// The instance's own threads, else the machine's cores shared evenly (at least one each).
int instance_threads(const InstanceSpec& s, size_t n_instances, unsigned cores);

// The engine id of an instance's n-th start: its name, then NAME-rN after restarts, so that
// decode instances never take a restarted prefill instance for the one they knew (whose
// KV transport address they keep).
std::string engine_id(const std::string& name, int restarts);

// Instances that prefill (prefill and unified ones) publish their KV events on a free port
// of their host, for the proxy's prefix-aware routing.
std::vector<std::string> serve_args(const InstanceSpec& s, const std::string& model_path, const std::string& served_name, int threads,
                                    int port, const std::string& engine_id);

// An instance's address as the proxy and the launcher reach it: a wildcard listening
// address (0.0.0.0, ::) becomes the loopback one.
std::string instance_url(const std::string& host, int port);

// The proxy's instances file (proxy/instances_file.h): each instance's name, role, URL
// (`urls[i]` for `instances[i]`) and weight.
std::string proxy_instances_file(const std::vector<InstanceSpec>& instances, const std::vector<std::string>& urls);

// The proxy reads its instances from `instances_file`; `--policy` only when the topology
// sets it. The proxy tokenizes prompts with the model's own tokenizer (`--tokenizer
// model_path`), which prefix-aware routing needs.
std::vector<std::string> proxy_args(const ProxySpec& p, const std::string& instances_file, const std::string& model_path);

// One command line as a shell would take it back (arguments quoted where needed).
std::string shell_line(const std::vector<std::string>& argv);

}  // namespace moe::launch
