#include "launch/commands.h"

#include "proxy/instances_file.h"

#include <fmt/format.h>

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

int instance_threads(const InstanceSpec& s, size_t n_instances, unsigned cores) {
  if (s.threads > 0) return s.threads;
  return std::max(1, int(cores / std::max<size_t>(1, n_instances)));
}

std::string engine_id(const std::string& name, int restarts) {
  return restarts == 0 ? name : fmt::format("{}-r{}", name, restarts);
}

std::vector<std::string> serve_args(const InstanceSpec& s, const std::string& model_path, const std::string& served_name, int threads,
                                    int port, const std::string& id) {
  std::vector<std::string> a{"serve",  "--model", model_path,           "--served-model-name", served_name,
                             "--role", role_name(s.role), "--host", s.host, "--port", std::to_string(port),
                             "--threads", std::to_string(threads), "--engine-id", id, "--kv-transport", s.kv_transport};
  if (s.role != InstanceRole::kDecode) a.insert(a.end(), {"--kv-events-endpoint", fmt::format("tcp://{}:*", s.host)});
  a.insert(a.end(), s.args.begin(), s.args.end());
  return a;
}

std::string instance_url(const std::string& host, int port) {
  std::string h = host;
  if (h == "0.0.0.0") h = "127.0.0.1";
  else if (h == "::") h = "::1";
  if (h.find(':') != std::string::npos) h = "[" + h + "]";
  return fmt::format("http://{}:{}", h, port);
}

std::string proxy_instances_file(const std::vector<InstanceSpec>& instances, const std::vector<std::string>& urls) {
  std::vector<proxy::InstanceSpec> out;
  for (size_t i = 0; i < instances.size(); ++i) {
    const InstanceSpec& s = instances[i];
    const proxy::InstanceRole role = s.role == InstanceRole::kPrefill  ? proxy::InstanceRole::prefill
                                     : s.role == InstanceRole::kDecode ? proxy::InstanceRole::decode
                                                                       : proxy::InstanceRole::both;
    out.push_back({s.name, urls[i], role, s.weight});
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
