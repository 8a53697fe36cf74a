#include "launch/commands.h"

#include "proxy/instances_file.h"

#include <fmt/format.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <string_view>

namespace moe::launch {

std::string default_model_cache_dir() {
  namespace fs = std::filesystem;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return (fs::path(xdg) / "moengine" / "models").string();
  if (const char* home = std::getenv("HOME"); home && *home) return (fs::path(home) / ".cache" / "moengine" / "models").string();
  return (fs::current_path() / ".moengine-cache" / "models").string();
}

std::string generated_model_path(const GeneratedModel& g) {
  const std::string dir = g.cache_dir.empty() ? default_model_cache_dir() : g.cache_dir;
  const std::string file = fmt::format("{}-{}-{}-seed{}.gguf", g.arch, g.preset, g.type, g.seed);
  return (std::filesystem::path(dir) / file).string();
}

std::vector<std::string> gen_model_args(const GeneratedModel& g, const std::string& out) {
  return {"gen-model", "--arch", g.arch, "--preset", g.preset, "--type", g.type, "--seed", std::to_string(g.seed), "--out", out};
}

std::string served_model_name(const ModelSpec& model, const std::string& model_path) {
  if (!model.served_name.empty()) return model.served_name;
  std::string p = model_path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const std::string stem = std::filesystem::path(p).stem().string();
  return stem.empty() ? p : stem;
}

int instance_threads(const Topology& t, const InstanceSpec& s, unsigned cores) {
  if (s.threads > 0) return s.threads;
  if (t.remote(s)) return 0;
  size_t local_ranks = 0;
  for (const InstanceSpec& i : t.instances)
    for (const RankSpec& r : i.ranks) local_ranks += !t.remote(r);
  return std::max(1, int(cores / std::max<size_t>(1, local_ranks)));
}

std::string engine_id(const std::string& name, int restarts) {
  return restarts == 0 ? name : fmt::format("{}-r{}", name, restarts);
}

namespace {

// One value when every rank has the same, else the comma-separated list serve takes.
template <typename F>
std::string per_rank(const InstanceSpec& s, F value) {
  std::vector<std::string> v;
  for (const RankSpec& r : s.ranks) v.push_back(value(r));
  if (std::all_of(v.begin(), v.end(), [&](const std::string& x) { return x == v[0]; })) return v[0];
  return fmt::format("{}", fmt::join(v, ","));
}

}  // namespace

std::vector<std::string> serve_args(const InstanceSpec& s, const std::string& model_path, const std::string& served_name, int threads,
                                    const std::vector<int>& ports, const std::string& id) {
  std::string port;
  if (!s.group()) {
    port = std::to_string(ports.at(0));
  } else if (std::all_of(ports.begin(), ports.end(), [](int p) { return p == 0; })) {
    port = "0";
  } else {
    port = fmt::format("{}", fmt::join(ports, ","));
  }
  std::vector<std::string> a{"serve",  "--model", model_path, "--served-model-name", served_name, "--role", role_name(s.role),
                             "--host", per_rank(s, [](const RankSpec& r) { return r.address; }), "--port", port};
  if (threads > 0) a.insert(a.end(), {"--threads", std::to_string(threads)});
  a.insert(a.end(), {"--engine-id", id, "--kv-transport", s.kv_transport});
  if (s.kv_cache_dtype != "auto") a.insert(a.end(), {"--kv-cache-dtype", s.kv_cache_dtype});
  if (!s.speculative_config.empty()) a.insert(a.end(), {"--speculative-config", s.speculative_config});
  if (s.role != InstanceRole::kDecode) {
    a.insert(a.end(), {"--kv-events-endpoint", per_rank(s, [](const RankSpec& r) { return fmt::format("tcp://{}:*", r.address); })});
  }
  if (s.group()) {
    a.insert(a.end(), {"--ep", std::to_string(s.ep)});
    a.insert(a.end(), s.ep_args.begin(), s.ep_args.end());
  }
  a.insert(a.end(), s.args.begin(), s.args.end());
  return a;
}

std::vector<std::string> process_argv(const Topology& t, const InstanceSpec& s, const ProcessContext& c, const std::vector<int>& ports,
                                      int restarts) {
  const HostSpec* remote = nullptr;  // the host whose binary, model and folder a remote start uses
  for (const RankSpec& r : s.ranks)
    if (t.remote(r) && !remote) remote = t.host_of(r);
  const std::string model = remote && !remote->model.empty() ? remote->model : c.model_path;
  const std::vector<std::string> serve =
      serve_args(s, model, c.served_name, instance_threads(t, s, c.cores), ports, engine_id(s.name, restarts));
  std::vector<std::string> argv;
  if (!s.group()) {
    if (!remote) {
      argv = {c.self};
      argv.insert(argv.end(), serve.begin(), serve.end());
      return argv;
    }
    std::vector<std::string> command{remote->binary};
    command.insert(command.end(), serve.begin(), serve.end());
    const std::string cd = remote->workdir.empty() ? "" : "cd " + shell_line({remote->workdir}) + " && ";
    // -tt: the remote process has a terminal, so that it gets SIGHUP when the connection
    // ends (launch stops it by ending ssh).
    return {"ssh", "-F", c.ssh_config, "-tt", remote->name, cd + "exec " + shell_line(command)};
  }
  argv = {"mpirun"};
  if (c.as_root) argv.push_back("--allow-run-as-root");
  // Each rank runs its own threads over its host's cores: no pinning to one core.
  argv.insert(argv.end(), {"--bind-to", "none", "-np", std::to_string(s.ep)});
  if (!remote) {
    // Every rank here: as many as asked, whatever the core count.
    argv.push_back("--oversubscribe");
  } else {
    std::vector<std::string> slots;
    for (size_t i = 0; i < s.ranks.size();) {
      size_t j = i;
      while (j < s.ranks.size() && s.ranks[j].host == s.ranks[i].host) ++j;
      slots.push_back(fmt::format("{}:{}", s.ranks[i].address, j - i));
      i = j;
    }
    argv.insert(argv.end(), {"--host", fmt::format("{}", fmt::join(slots, ",")), "--map-by", "slot", "--mca", "plm_rsh_agent",
                             "ssh -F " + c.ssh_config});
    if (!remote->workdir.empty()) argv.insert(argv.end(), {"--wdir", remote->workdir});
  }
  argv.insert(argv.end(), s.mpirun_args.begin(), s.mpirun_args.end());
  argv.push_back(remote ? remote->binary : c.self);
  argv.insert(argv.end(), serve.begin(), serve.end());
  return argv;
}

std::string ssh_config_text(const Topology& t) {
  std::string out;
  for (const HostSpec& h : t.hosts) {
    if (h.local) continue;
    if (out.empty()) out = "# Written by moengine launch from the topology's hosts: ssh (and mpirun's ssh) read it with -F.\n";
    out += fmt::format("Host {} {}\n  HostName {}\n  Port {}\n  BatchMode yes\n", h.name, h.address, h.address, h.ssh_port);
    if (!h.user.empty()) out += fmt::format("  User {}\n", h.user);
    if (!h.identity.empty()) out += fmt::format("  IdentityFile {}\n", h.identity);
    for (const std::string& o : h.ssh_options) out += fmt::format("  {}\n", o);
  }
  return out;
}

std::string instance_url(const std::string& host, int port) {
  std::string h = host;
  if (h == "0.0.0.0") h = "127.0.0.1";
  else if (h == "::") h = "::1";
  if (h.find(':') != std::string::npos) h = "[" + h + "]";
  return fmt::format("http://{}:{}", h, port);
}

std::string proxy_instances_file(const std::vector<InstanceSpec>& instances, const std::vector<std::vector<std::string>>& urls) {
  std::vector<proxy::InstanceSpec> out;
  for (size_t i = 0; i < instances.size(); ++i) {
    const InstanceSpec& s = instances[i];
    const proxy::InstanceRole role = s.role == InstanceRole::kPrefill  ? proxy::InstanceRole::prefill
                                     : s.role == InstanceRole::kDecode ? proxy::InstanceRole::decode
                                                                       : proxy::InstanceRole::both;
    for (size_t r = 0; r < s.ranks.size(); ++r) out.push_back({s.ranks[r].name, urls[i][r], role, s.weight, s.group() ? s.name : ""});
  }
  return proxy::instances_file_text(out);
}

std::vector<std::string> proxy_args(const ProxySpec& p, const std::string& instances_file, const std::string& model_path) {
  std::vector<std::string> a{"proxy", "--host", p.host, "--port", std::to_string(p.port), "--tokenizer", model_path, "--config", instances_file};
  if (!p.policy.empty()) a.insert(a.end(), {"--policy", p.policy});
  if (!p.api_key.empty()) a.insert(a.end(), {"--api-key", p.api_key});
  if (!p.admin_key.empty()) a.insert(a.end(), {"--admin-key", p.admin_key});
  a.insert(a.end(), p.args.begin(), p.args.end());
  return a;
}

std::string shell_line(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& arg : argv) {
    if (!line.empty()) line += ' ';
    const bool plain = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("-_./:=,+@%").find(c) != std::string_view::npos;
    });
    if (plain) {
      line += arg;
      continue;
    }
    line += '\'';
    for (const char c : arg) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += '\'';
  }
  return line;
}

}  // namespace moe::launch
