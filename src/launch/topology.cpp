#include "launch/topology.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>

#include "config/yaml_fields.h"
#include "core/error.h"
#include "engine/speculative.h"
#include "kernels/kv_format.h"

namespace moe::launch {

using config::fail_at;
using config::location;
using config::MapReader;
namespace {

const std::vector<std::string> kRoles{"prefill", "decode", "both"};
const std::vector<std::string> kRestartPolicies{"never", "on-failure"};
const std::vector<std::string> kTransports{"ucx", "tcp"};
const std::vector<std::string> kKvDtypes{"auto", "f32", "f16", "bf16", "fp8_e4m3", "q8_0"};
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

std::vector<HostSpec> read_hosts(const std::string& file, const MapReader& top) {
  std::vector<HostSpec> hosts;
  if (!top.has("hosts")) return hosts;
  const YAML::Node list = top.get("hosts");
  if (!list.IsSequence() || list.size() == 0) top.fail("hosts", "must be a non-empty list of hosts (each with a name and an address)");
  std::map<std::string, size_t> names;
  for (size_t i = 0; i < list.size(); ++i) {
    const MapReader r(file, list[i], fmt::format("hosts[{}]", i),
                      {"name", "address", "local", "user", "ssh_port", "identity", "ssh_options", "model", "workdir", "binary"});
    if (!list[i].IsMap()) r.fail("", "must be a map with at least name and address");
    HostSpec h;
    h.where = location(file, list[i]);
    if (!r.has("name")) r.fail("name", "missing");
    h.name = r.text("name", "");
    if (!valid_name(h.name)) r.fail("name", fmt::format("'{}' must start with a letter or digit and hold only letters, digits, '-', '_', '.'", h.name));
    if (const auto [it, added] = names.emplace(h.name, i); !added) r.fail("name", fmt::format("'{}' is also the name of hosts[{}]", h.name, it->second));
    if (!r.has("address")) r.fail("address", "missing: the address its processes listen on and are reached at");
    h.address = r.text("address", "");
    if (h.address.empty() || h.address == "0.0.0.0" || h.address == "::") {
      r.fail("address", "must be an address the other hosts reach this one at (not empty, not a wildcard)");
    }
    h.local = r.choice("local", "false", {"true", "false"}) == "true";
    h.user = r.text("user", "");
    h.ssh_port = int(r.integer("ssh_port", h.ssh_port, 1, 65535));
    h.identity = r.text("identity", "");
    h.ssh_options = r.texts("ssh_options", {});
    for (const std::string& o : h.ssh_options)
      if (o.find('=') == std::string::npos) r.fail("ssh_options", fmt::format("'{}' is not Key=Value (an ssh -o option)", o));
    h.model = r.text("model", "");
    h.workdir = r.text("workdir", "");
    h.binary = r.text("binary", h.binary);
    if (h.binary.empty()) r.fail("binary", "must not be empty");
    hosts.push_back(std::move(h));
  }
  return hosts;
}

// The index of the inventory host named `name`; -1 when it names none.
int host_index(const std::vector<HostSpec>& hosts, const std::string& name) {
  for (size_t i = 0; i < hosts.size(); ++i)
    if (hosts[i].name == name) return int(i);
  return -1;
}

// A speculative_config field must be what serve's --speculative-config takes.
SpeculativeConfig checked_speculative_config(const MapReader& r, const std::string& json) {
  try {
    return parse_speculative_config(json);
  } catch (const Error& e) {
    r.fail("speculative_config", e.what());
  }
}

// What an instance entry takes from `defaults:` when it does not say.
struct Defaults {
  std::string host = "127.0.0.1";
  int threads = 0;
  std::string kv_transport = "ucx";
  std::string kv_cache_dtype = "auto";
  std::string speculative_config;
  std::vector<std::string> args;
  std::vector<std::string> mpirun_args;
  std::string restart = "never";
  int max_restarts = 3;
};

Defaults read_defaults(const std::string& file, const MapReader& top) {
  const MapReader r(file, top.get("defaults"), "defaults",
                    {"host", "threads", "kv_transport", "kv_cache_dtype", "speculative_config", "args", "mpirun_args", "restart",
                     "max_restarts"});
  Defaults d;
  d.host = r.text("host", d.host);
  d.threads = int(r.integer("threads", d.threads, 0, 4096));
  d.kv_transport = r.choice("kv_transport", d.kv_transport, kTransports);
  d.kv_cache_dtype = r.choice("kv_cache_dtype", d.kv_cache_dtype, kKvDtypes);
  d.speculative_config = r.text("speculative_config", "");
  if (!d.speculative_config.empty()) checked_speculative_config(r, d.speculative_config);
  d.args = r.texts("args", {});
  d.mpirun_args = r.texts("mpirun_args", {});
  d.restart = r.choice("restart", d.restart, kRestartPolicies);
  d.max_restarts = int(r.integer("max_restarts", d.max_restarts, 0, 1000000));
  return d;
}

// What the entries read so far have taken: names and fixed ports must not repeat.
struct Taken {
  std::map<std::string, size_t> entries;                      // entry name -> its index
  // The KV dtype of the first entry: a decode instance reads its prefill instances' KV as
  // it is stored, so every instance must store the same.
  std::optional<std::pair<std::string, size_t>> kv_cache_dtype;
  std::map<std::pair<int, int>, std::string> fixed_ports;     // (host index, port) -> the instance on it
};

// Where an entry's ranks run: `host:` (an inventory host, or an address of the launching
// machine) or `hosts:` (inventory hosts the ranks, or the replicas, are spread over).
struct Placement {
  std::vector<int> hosts;  // inventory indices; {-1}: the launching machine
  std::string address;     // with hosts {-1}: the address to listen on
};

Placement read_placement(const MapReader& r, const std::vector<HostSpec>& inventory, const Defaults& d) {
  if (r.has("host") && r.has("hosts")) r.fail("hosts", "give host (one) or hosts (a list), not both");
  Placement p;
  if (r.has("hosts")) {
    const std::vector<std::string> names = r.texts("hosts", {});
    if (names.empty()) r.fail("hosts", "must not be empty");
    for (const std::string& n : names) {
      const int i = host_index(inventory, n);
      if (i < 0) r.fail("hosts", fmt::format("'{}' is not a host of the top-level hosts list", n));
      p.hosts.push_back(i);
    }
    return p;
  }
  const std::string host = r.text("host", d.host);
  if (host.empty()) r.fail("host", "must not be empty");
  const int i = host_index(inventory, host);
  p.hosts = {i};
  p.address = i >= 0 ? inventory[size_t(i)].address : host;
  return p;
}

// One entry of `instances:`, expanded into its replicas.
std::vector<InstanceSpec> read_instance(const std::string& file, const YAML::Node& node, size_t index, const Defaults& d,
                                        const std::vector<HostSpec>& inventory, Taken& taken) {
  const MapReader r(file, node, fmt::format("instances[{}]", index),
                    {"name", "role", "count", "host", "hosts", "port", "threads", "kv_transport", "kv_cache_dtype", "speculative_config", "weight", "args", "restart",
                     "max_restarts", "ep", "placement", "replace_interval_s", "replace_max_moves", "replace_target_balance",
                     "ep_timeout_s", "mpirun_args"});
  if (!node.IsMap()) r.fail("", "must be a map with at least name and role");
  if (!r.has("name")) r.fail("name", "missing");
  const std::string entry = r.text("name", "");
  if (!valid_name(entry)) {
    r.fail("name", fmt::format("'{}' must start with a letter or digit and hold only letters, digits, '-', '_', '.'", entry));
  }
  if (const auto [it, added] = taken.entries.emplace(entry, index); !added) {
    r.fail("name", fmt::format("'{}' is also the name of instances[{}]", entry, it->second));
  }
  if (!r.has("role")) r.fail("role", "missing (prefill, decode or both)");
  InstanceSpec base;
  base.entry = entry;
  base.role = parse_role(r.choice("role", "", kRoles));
  const int count = int(r.integer("count", 1, 1, 1024));
  base.ep = int(r.integer("ep", 0, 1, 4096));
  for (const char* key : {"placement", "replace_interval_s", "replace_max_moves", "replace_target_balance", "ep_timeout_s", "mpirun_args"})
    if (r.has(key) && !r.has("ep")) r.fail(key, "is a setting of an expert-parallel group: give ep: N too");
  if (r.has("placement")) base.ep_args.insert(base.ep_args.end(), {"--placement", r.text("placement", "")});
  if (r.has("replace_interval_s"))
    base.ep_args.insert(base.ep_args.end(), {"--replace-interval-s", fmt::format("{}", r.number("replace_interval_s", 0, -1e-300))});
  if (r.has("replace_max_moves"))
    base.ep_args.insert(base.ep_args.end(), {"--replace-max-moves", std::to_string(r.integer("replace_max_moves", 1, 1, 1 << 20))});
  if (r.has("replace_target_balance"))
    base.ep_args.insert(base.ep_args.end(), {"--replace-target-balance", fmt::format("{}", r.number("replace_target_balance", 1, 0))});
  if (r.has("ep_timeout_s")) base.ep_args.insert(base.ep_args.end(), {"--ep-timeout-s", fmt::format("{}", r.number("ep_timeout_s", 1, 0))});
  base.mpirun_args = d.mpirun_args;
  const std::vector<std::string> own_mpirun = r.texts("mpirun_args", {});
  base.mpirun_args.insert(base.mpirun_args.end(), own_mpirun.begin(), own_mpirun.end());

  const Placement where = read_placement(r, inventory, d);
  const int ranks = std::max(1, base.ep);
  // A group's ranks go to its hosts in order, as many on each; plain replicas round robin.
  const size_t n_hosts = where.hosts.size();
  if (base.group() && ranks % int(n_hosts) != 0) {
    r.fail("hosts", fmt::format("{} ranks do not divide evenly over {} hosts", ranks, n_hosts));
  }
  const int per_host = base.group() ? ranks / int(n_hosts) : 1;
  // One mpirun command line starts every rank: the same binary, model path and folder on
  // each of the group's hosts that is started remotely.
  if (base.group()) {
    const HostSpec* first = nullptr;
    for (int h : where.hosts) {
      if (h < 0 || inventory[size_t(h)].local) continue;
      const HostSpec& host = inventory[size_t(h)];
      if (!first) {
        first = &host;
      } else if (host.binary != first->binary || host.model != first->model || host.workdir != first->workdir) {
        r.fail("hosts", fmt::format("hosts {} and {} differ in binary, model or workdir: one mpirun starts all ranks of a group, "
                                    "so they must be the same",
                                    first->name, host.name));
      }
    }
  }
  const int port = int(r.integer("port", 0, 0, 65535));
  if (port > 0 && port + count * ranks - 1 > 65535) {
    r.fail("port", fmt::format("{} ports from port {} go past 65535", count * ranks, port));
  }
  base.threads = int(r.integer("threads", d.threads, 0, 4096));
  base.kv_transport = r.choice("kv_transport", d.kv_transport, kTransports);
  base.kv_cache_dtype = r.choice("kv_cache_dtype", d.kv_cache_dtype, kKvDtypes);
  const std::string dtype = kv_dtype_name(*parse_kv_dtype(base.kv_cache_dtype));
  if (!taken.kv_cache_dtype) {
    taken.kv_cache_dtype.emplace(dtype, index);
  } else if (taken.kv_cache_dtype->first != dtype) {
    r.fail("kv_cache_dtype", fmt::format("{} differs from the {} of instances[{}]: a decode instance reads the KV of a prefill "
                                         "instance as it is stored, so every instance must store the same dtype",
                                         dtype, taken.kv_cache_dtype->first, taken.kv_cache_dtype->second));
  }
  base.speculative_config = r.text("speculative_config", d.speculative_config);
  // A prefill instance makes one token per request: nothing to verify. It takes method
  // mtp only, to keep the MTP layer's KV for its decode instances; any other method taken
  // from the defaults is left out, set on the entry itself it is a mistake.
  if (!base.speculative_config.empty()) {
    const bool mtp = speculative_uses_mtp(checked_speculative_config(r, base.speculative_config));
    if (base.role == InstanceRole::kPrefill && !mtp) {
      if (r.has("speculative_config")) {
        r.fail("speculative_config", "a prefill instance makes one token per request: it takes only method mtp (to keep the MTP "
                                     "layer's KV for its decode instances); decode and both instances speculate");
      }
      base.speculative_config.clear();
    }
  }
  base.weight = r.number("weight", 1.0, 0.0);
  base.args = d.args;
  const std::vector<std::string> own = r.texts("args", {});
  base.args.insert(base.args.end(), own.begin(), own.end());
  base.restart = parse_restart(r.choice("restart", d.restart, kRestartPolicies));
  base.max_restarts = int(r.integer("max_restarts", d.max_restarts, 0, 1000000));

  std::vector<InstanceSpec> replicas;
  for (int i = 0; i < count; ++i) {
    InstanceSpec s = base;
    s.name = fmt::format("{}-{}", entry, i);
    for (int rank = 0; rank < ranks; ++rank) {
      RankSpec k;
      k.name = s.group() ? fmt::format("{}-rank{}", s.name, rank) : s.name;
      k.host = s.group() ? where.hosts[size_t(rank / per_host)] : where.hosts[size_t(i) % n_hosts];
      k.address = k.host >= 0 ? inventory[size_t(k.host)].address : where.address;
      if (port > 0) {
        k.port = port + i * ranks + rank;
        if (const auto [it, added] = taken.fixed_ports.emplace(std::pair{k.host, k.port}, k.name); !added) {
          r.fail("port", fmt::format("port {} of {} is also the port of {} on its host", k.port, k.name, it->second));
        }
      }
      s.ranks.push_back(std::move(k));
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
  const MapReader top(file_name, root, "", {"model", "hosts", "defaults", "instances", "proxy", "timeouts"});

  Topology t;
  t.file = file_name;
  t.model = read_model(file_name, top);
  t.hosts = read_hosts(file_name, top);
  const Defaults defaults = read_defaults(file_name, top);
  t.proxy = read_proxy(file_name, top);
  Taken taken;
  if (t.proxy.port > 0) taken.fixed_ports[{-1, t.proxy.port}] = "the proxy";
  const YAML::Node list = top.get("instances");
  if (!list.IsSequence() || list.size() == 0) top.fail("instances", "must be a non-empty list of instances (each with a name and a role)");
  int n_prefill = 0, n_decode = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    for (InstanceSpec& s : read_instance(file_name, list[i], i, defaults, t.hosts, taken)) {
      n_prefill += s.role == InstanceRole::kPrefill;
      n_decode += s.role == InstanceRole::kDecode;
      t.instances.push_back(std::move(s));
    }
  }
  if (n_prefill > 0 && n_decode == 0) top.fail("instances", "there are prefill instances but no decode instance to hand their requests to");
  if (n_decode > 0 && n_prefill == 0) top.fail("instances", "there are decode instances but no prefill instance to feed them");
  // Each spec was checked when read; the first decode instance drafting with the MTP layer
  // and the first prefill instance not keeping its KV, if both exist, cannot be paired.
  const auto uses_mtp = [](const InstanceSpec& s) {
    return !s.speculative_config.empty() && speculative_uses_mtp(parse_speculative_config(s.speculative_config));
  };
  const auto first_of = [&](InstanceRole role, bool mtp) {
    return std::find_if(t.instances.begin(), t.instances.end(), [&](const InstanceSpec& s) { return s.role == role && uses_mtp(s) == mtp; });
  };
  if (const auto d = first_of(InstanceRole::kDecode, true), p = first_of(InstanceRole::kPrefill, false);
      d != t.instances.end() && p != t.instances.end()) {
    top.fail("instances", fmt::format("decode instance {} drafts with the MTP layer, so it pulls that layer's KV too, and "
                                      "prefill instance {} does not keep it: give it speculative_config with method mtp "
                                      "(or put that in defaults)", d->name, p->name));
  }
  const MapReader timeouts(file_name, top.get("timeouts"), "timeouts", {"ready_s", "stop_s"});
  t.ready_timeout_s = timeouts.number("ready_s", t.ready_timeout_s, 0.0);
  t.stop_timeout_s = timeouts.number("stop_s", t.stop_timeout_s, 0.0);
  return t;
}

bool Topology::remote(const InstanceSpec& s) const {
  for (const RankSpec& r : s.ranks)
    if (remote(r)) return true;
  return false;
}

Topology load_topology(const std::string& path) { return parse_topology(config::read_file(path, "topology file"), path); }

}  // namespace moe::launch
