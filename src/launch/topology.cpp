#include "launch/topology.h"

#include <fmt/format.h>

#include <cctype>
#include <map>

#include "config/yaml_fields.h"
#include "core/error.h"

namespace moe::launch {

using config::fail_at;
using config::location;
using config::MapReader;
namespace {

const std::vector<std::string> kRoles{"prefill", "decode", "both"};
const std::vector<std::string> kRestartPolicies{"never", "on-failure"};
const std::vector<std::string> kTransports{"ucx", "tcp"};
// gen-model's choices, checked here so that a typo is reported at its line.
const std::vector<std::string> kArchs{"deepseek2", "qwen3moe"};
const std::vector<std::string> kPresets{"tiny", "mid"};
const std::vector<std::string> kWeightTypes{"f32", "f16",  "bf16", "q8_0", "q4_0", "q5_0",
                                            "q4_1", "q5_1", "q4_K", "q5_K", "q6_K", "q4_K_M"};

InstanceRole parse_role(const std::string& s) {
  return s == "prefill" ? InstanceRole::kPrefill : s == "decode" ? InstanceRole::kDecode : InstanceRole::kBoth;
}

RestartPolicy parse_restart(const std::string& s) { return s == "on-failure" ? RestartPolicy::kOnFailure : RestartPolicy::kNever; }

// Names become file names and engine ids: keep them to what both take unquoted.
bool valid_name(const std::string& s) {
  if (s.empty() || !std::isalnum(static_cast<unsigned char>(s[0]))) return false;
  for (const char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

ModelSpec read_model(const std::string& file, const MapReader& top) {
  if (!top.has("model")) {
    top.fail("model", "missing: give a model (model: path/to.gguf) or one to generate (model: {generate: {preset: tiny}})");
  }
  const YAML::Node node = top.get("model");
  ModelSpec m;
  m.where = location(file, node);
  if (node.IsScalar()) {
    m.path = node.Scalar();
    return m;
  }
  const MapReader r(file, node, "model", {"path", "generate", "name"});
  if (r.has("path") == r.has("generate")) r.fail("", "give either path (a model file) or generate (a model to generate)");
  m.path = r.text("path", "");
  m.served_name = r.text("name", "");
  if (r.has("generate")) {
    const MapReader g(file, r.get("generate"), "model.generate", {"arch", "preset", "type", "seed", "cache_dir"});
    GeneratedModel gen;
    gen.arch = g.choice("arch", gen.arch, kArchs);
    gen.preset = g.choice("preset", gen.preset, kPresets);
    gen.type = g.choice("type", gen.type, kWeightTypes);
    gen.seed = uint64_t(g.integer("seed", int64_t(gen.seed), 0, INT64_MAX));
    gen.cache_dir = g.text("cache_dir", "");
    m.generate = gen;
  } else if (m.path.empty()) {
    r.fail("path", "must not be empty");
  }
  return m;
}

// What an instance entry takes from `defaults:` when it does not say.
struct Defaults {
  std::string host = "127.0.0.1";
  int threads = 0;
  std::string kv_transport = "ucx";
  std::vector<std::string> args;
  std::string restart = "never";
  int max_restarts = 3;
};

Defaults read_defaults(const std::string& file, const MapReader& top) {
  const MapReader r(file, top.get("defaults"), "defaults", {"host", "threads", "kv_transport", "args", "restart", "max_restarts"});
  Defaults d;
  d.host = r.text("host", d.host);
  d.threads = int(r.integer("threads", d.threads, 0, 4096));
  d.kv_transport = r.choice("kv_transport", d.kv_transport, kTransports);
  d.args = r.texts("args", {});
  d.restart = r.choice("restart", d.restart, kRestartPolicies);
  d.max_restarts = int(r.integer("max_restarts", d.max_restarts, 0, 1000000));
  return d;
}

// What the entries read so far have taken: names and fixed ports must not repeat.
struct Taken {
  std::map<std::string, size_t> groups;       // entry name -> its index
  std::map<int, std::string> fixed_ports;     // port -> the instance (or "the proxy") on it
};

// One entry of `instances:`, expanded into its replicas.
std::vector<InstanceSpec> read_instance(const std::string& file, const YAML::Node& node, size_t index, const Defaults& d,
                                        Taken& taken) {
  const MapReader r(file, node, fmt::format("instances[{}]", index),
                    {"name", "role", "count", "host", "port", "threads", "kv_transport", "weight", "args", "restart", "max_restarts"});
  if (!node.IsMap()) r.fail("", "must be a map with at least name and role");
  if (!r.has("name")) r.fail("name", "missing");
  const std::string group = r.text("name", "");
  if (!valid_name(group)) {
    r.fail("name", fmt::format("'{}' must start with a letter or digit and hold only letters, digits, '-', '_', '.'", group));
  }
  if (const auto [it, added] = taken.groups.emplace(group, index); !added) {
    r.fail("name", fmt::format("'{}' is also the name of instances[{}]", group, it->second));
  }
  if (!r.has("role")) r.fail("role", "missing (prefill, decode or both)");
  InstanceSpec base;
  base.group = group;
  base.role = parse_role(r.choice("role", "", kRoles));
  const int count = int(r.integer("count", 1, 1, 1024));
  base.host = r.text("host", d.host);
  if (base.host.empty()) r.fail("host", "must not be empty");
  base.port = int(r.integer("port", 0, 0, 65535));
  if (base.port > 0 && base.port + count - 1 > 65535) {
    r.fail("port", fmt::format("{} replicas from port {} go past 65535", count, base.port));
  }
  base.threads = int(r.integer("threads", d.threads, 0, 4096));
  base.kv_transport = r.choice("kv_transport", d.kv_transport, kTransports);
  base.weight = r.number("weight", 1.0, 0.0);
  base.args = d.args;
  const std::vector<std::string> own = r.texts("args", {});
  base.args.insert(base.args.end(), own.begin(), own.end());
  base.restart = parse_restart(r.choice("restart", d.restart, kRestartPolicies));
  base.max_restarts = int(r.integer("max_restarts", d.max_restarts, 0, 1000000));

  std::vector<InstanceSpec> replicas;
  for (int i = 0; i < count; ++i) {
    InstanceSpec s = base;
    s.name = fmt::format("{}-{}", group, i);
    if (base.port > 0) {
      s.port = base.port + i;
      if (const auto [it, added] = taken.fixed_ports.emplace(s.port, s.name); !added) {
        r.fail("port", fmt::format("port {} of {} is also the port of {}", s.port, s.name, it->second));
      }
    }
    replicas.push_back(std::move(s));
  }
  return replicas;
}

ProxySpec read_proxy(const std::string& file, const MapReader& top) {
  const MapReader r(file, top.get("proxy"), "proxy", {"host", "port", "policy", "api_key", "admin_key", "args"});
  ProxySpec p;
  p.host = r.text("host", p.host);
  if (p.host.empty()) r.fail("host", "must not be empty");
  p.port = int(r.integer("port", p.port, 0, 65535));
  p.policy = r.text("policy", "");
  p.api_key = r.text("api_key", "");
  p.admin_key = r.text("admin_key", "");
  p.args = r.texts("args", {});
  return p;
}

}  // namespace

const char* role_name(InstanceRole role) {
  switch (role) {
    case InstanceRole::kPrefill: return "prefill";
    case InstanceRole::kDecode: return "decode";
    case InstanceRole::kBoth: return "both";
  }
  return "both";
}

Topology parse_topology(const std::string& yaml_text, const std::string& file_name) {
  const YAML::Node root = config::parse_yaml(yaml_text, file_name);
  if (!root.IsMap()) fail("{}: must be a map with at least the keys model and instances", file_name);
  const MapReader top(file_name, root, "", {"model", "defaults", "instances", "proxy", "timeouts"});

  Topology t;
  t.file = file_name;
  t.model = read_model(file_name, top);
  const Defaults defaults = read_defaults(file_name, top);
  t.proxy = read_proxy(file_name, top);
  Taken taken;
  if (t.proxy.port > 0) taken.fixed_ports[t.proxy.port] = "the proxy";
  const YAML::Node list = top.get("instances");
  if (!list.IsSequence() || list.size() == 0) top.fail("instances", "must be a non-empty list of instances (each with a name and a role)");
  int n_prefill = 0, n_decode = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    for (InstanceSpec& s : read_instance(file_name, list[i], i, defaults, taken)) {
      n_prefill += s.role == InstanceRole::kPrefill;
      n_decode += s.role == InstanceRole::kDecode;
      t.instances.push_back(std::move(s));
    }
  }
  if (n_prefill > 0 && n_decode == 0) top.fail("instances", "there are prefill instances but no decode instance to hand their requests to");
  if (n_decode > 0 && n_prefill == 0) top.fail("instances", "there are decode instances but no prefill instance to feed them");
  const MapReader timeouts(file_name, top.get("timeouts"), "timeouts", {"ready_s", "stop_s"});
  t.ready_timeout_s = timeouts.number("ready_s", t.ready_timeout_s, 0.0);
  t.stop_timeout_s = timeouts.number("stop_s", t.stop_timeout_s, 0.0);
  return t;
}

Topology load_topology(const std::string& path) { return parse_topology(config::read_file(path, "topology file"), path); }

}  // namespace moe::launch
