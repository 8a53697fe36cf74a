#include "sim/sim_config.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "config/yaml_fields.h"
#include "core/error.h"

#ifndef MOENGINE_SIM_PROFILE_DIR
#define MOENGINE_SIM_PROFILE_DIR ""
#endif

namespace moe::sim {

using config::fail_at;
using config::MapReader;
namespace fs = std::filesystem;

double MtpConfig::tokens_per_step() const {
  double tokens = 1, p = 1;
  for (int32_t i = 0; i < draft_tokens; ++i) tokens += (p *= acceptance);
  return tokens;
}

std::vector<std::string> profile_dirs(const std::string& config_path) {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("MOENGINE_SIM_PROFILES")) {
    std::stringstream in(env);
    for (std::string d; std::getline(in, d, ':');)
      if (!d.empty()) dirs.push_back(d);
  }
  dirs.push_back(fs::path(config_path).parent_path().string());
  if (std::string(MOENGINE_SIM_PROFILE_DIR) != "") dirs.push_back(MOENGINE_SIM_PROFILE_DIR);
  return dirs;
}

YAML::Node load_config_tree(const std::string& path) {
  return config::parse_yaml(config::read_file(path, "simulation config"), path);
}

void set_field(YAML::Node& root, const std::string& key, const std::string& value) {
  std::vector<std::string> parts;
  std::stringstream in(key);
  for (std::string p; std::getline(in, p, '.');) parts.push_back(p);
  if (parts.empty() || key.empty()) fail("--vary: empty field name");
  // yaml-cpp's operator[] returns handles that alias the tree, so walking by reassigning a
  // Node would overwrite the parent; keep the chain of handles instead.
  std::vector<YAML::Node> chain{root};
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node parent = chain.back();
    if (!parent.IsMap() && !parent.IsNull())
      fail("--vary {}: {} is not a map in the config", key, fmt::join(parts.begin(), parts.begin() + long(i), "."));
    chain.push_back(parent[parts[i]]);
  }
  YAML::Node parent = chain.back();
  if (!parent.IsMap() && !parent.IsNull()) fail("--vary {}: the field's parent is not a map in the config", key);
  parent[parts.back()] = YAML::Load(value);
}

namespace {

std::string resolve_path(const std::string& config_path, const std::string& p) {
  if (p.empty() || fs::path(p).is_absolute()) return p;
  const fs::path near = fs::path(config_path).parent_path() / p;
  return fs::exists(near) ? near.string() : p;
}

// A profile file for `name` under <dir>/<kind>/, or an error naming where it looked.
std::string find_profile(const std::string& config_path, const std::string& kind, const std::string& name,
                         const YAML::Node& at, const std::string& field) {
  std::vector<std::string> tried;
  for (const std::string& dir : profile_dirs(config_path)) {
    const fs::path p = fs::path(dir.empty() ? "." : dir) / kind / (name + ".yaml");
    if (fs::exists(p)) return p.string();
    tried.push_back(p.string());
  }
  fail_at(config_path, at, field, fmt::format("no {} profile named '{}' (looked for {})", kind, name, fmt::join(tried, ", ")));
}

// A map of exactly one key among `kinds`: the key.
std::string one_of(const std::string& file, const YAML::Node& node, const std::string& field,
                   const std::vector<std::string>& kinds) {
  if (!node.IsMap() || node.size() != 1)
    fail_at(file, node, field, fmt::format("must be a map with one of the keys {}", fmt::join(kinds, ", ")));
  const std::string key = node.begin()->first.as<std::string>();
  if (std::find(kinds.begin(), kinds.end(), key) == kinds.end())
    fail_at(file, node.begin()->first, field + "." + key, fmt::format("unknown kind (expected one of {})", fmt::join(kinds, ", ")));
  return key;
}

Hardware hardware_of(const std::string& file, const YAML::Node& node) {
  if (node.IsScalar()) {
    const std::string path = find_profile(file, "hardware", node.Scalar(), node, "hardware");
    return read_hardware(path, config::parse_yaml(config::read_file(path, "hardware profile"), path), "");
  }
  return read_hardware(file, node, "hardware");
}

ModelShape model_of(const std::string& file, const YAML::Node& node, const ModelFileReader& reader) {
  if (node.IsScalar()) {
    const std::string path = find_profile(file, "models", node.Scalar(), node, "model");
    return read_model_shape(path, config::parse_yaml(config::read_file(path, "model profile"), path), "");
  }
  if (node.IsMap() && node.size() == 1 && (node["gguf"] || node["checkpoint"])) {
    const std::string kind = node["gguf"] ? "gguf" : "checkpoint";
    const YAML::Node value = node[kind];
    if (!value.IsScalar()) fail_at(file, value, "model." + kind, "must be a path");
    if (!reader) fail_at(file, value, "model." + kind, "reading model files is not available here");
    try {
      return reader(kind, resolve_path(file, value.Scalar()));
    } catch (const Error& e) {
      fail_at(file, value, "model." + kind, e.what());
    }
  }
  return read_model_shape(file, node, "model");
}

PoolConfig read_pool(const std::string& file, const MapReader& parent, const std::string& key, const SimConfig& c) {
  const MapReader r(file, parent.get(key), parent.field(key),
                    {"instances", "devices", "attention_dp", "attention_tp", "ep", "redundant_experts", "placement",
                     "max_batched_tokens", "max_sequences_per_device", "kv_cache_gib", "mem_util", "block_size"});
  PoolConfig p;
  constexpr int64_t kMaxDevices = 1 << 16;
  p.instances = int32_t(r.integer("instances", 1, 1, 1 << 12));
  p.attention_tp = int32_t(r.integer("attention_tp", 1, 1, kMaxDevices));
  if (r.has("devices")) {
    p.devices = int32_t(r.integer("devices", 1, 1, kMaxDevices));
    p.attention_dp = int32_t(r.integer("attention_dp", p.devices / p.attention_tp, 1, kMaxDevices));
  } else {
    p.attention_dp = int32_t(r.integer("attention_dp", 1, 1, kMaxDevices));
    p.devices = p.attention_dp * p.attention_tp;
  }
  if (int64_t(p.attention_dp) * p.attention_tp != p.devices)
    r.fail("attention_dp", fmt::format("times attention_tp ({} x {}) must equal devices ({})", p.attention_dp,
                                       p.attention_tp, p.devices));
  p.ep = int32_t(r.integer("ep", p.devices, 1, kMaxDevices));
  if (p.ep != p.devices)
    r.fail("ep", fmt::format("must equal devices ({}): an instance's experts spread over all its devices", p.devices));
  p.redundant_experts = int32_t(r.integer("redundant_experts", 0, 0, 1 << 20));
  const int64_t experts = c.model.experts;
  if (experts > 0 && (experts + p.redundant_experts) % p.ep != 0)
    r.fail("redundant_experts", fmt::format("{} experts + {} redundant do not divide evenly over ep {}", experts,
                                            p.redundant_experts, p.ep));
  if (experts == 0 && p.redundant_experts > 0) r.fail("redundant_experts", "the model has no routed experts");
  p.placement = r.choice("placement", "moengine", {"moengine", "eplb"});
  p.max_sequences_per_device = int32_t(r.integer("max_sequences_per_device", 256, 1, 1 << 20));
  p.max_batched_tokens = r.integer("max_batched_tokens", std::max<int64_t>(8192, p.max_sequences_per_rank()),
                                   1, int64_t(1) << 30);
  if (p.max_batched_tokens < p.max_sequences_per_rank())
    r.fail("max_batched_tokens", fmt::format("must be at least the {} sequences a rank holds", p.max_sequences_per_rank()));
  p.kv_cache_gib = r.number("kv_cache_gib", 0, -1e-300);
  p.mem_util = r.number("mem_util", 0.9, 0);
  if (p.mem_util > 1) r.fail("mem_util", "must be in (0, 1]");
  p.block_size = int32_t(r.integer("block_size", 64, 1, 1 << 16));
  return p;
}

Lengths read_lengths(const std::string& file, const MapReader& parent, const std::string& key, Lengths fallback) {
  if (!parent.has(key)) return fallback;
  const YAML::Node node = parent.get(key);
  const std::string field = parent.field(key);
  const std::string kind = one_of(file, node, field, {"fixed", "uniform", "lognormal"});
  const YAML::Node v = node[kind];
  Lengths l;
  auto positive = [&](const YAML::Node& n, const std::string& f) {
    double x = 0;
    try {
      x = n.as<double>();
    } catch (const YAML::Exception&) {
      fail_at(file, n, f, "must be a number of tokens");
    }
    if (!(x >= 1) || !std::isfinite(x)) fail_at(file, n, f, "must be at least 1 token");
    return x;
  };
  if (kind == "fixed") {
    l = {Lengths::Kind::fixed, positive(v, field + ".fixed"), 0};
  } else if (kind == "uniform") {
    if (!v.IsSequence() || v.size() != 2) fail_at(file, v, field + ".uniform", "must be [min, max]");
    l = {Lengths::Kind::uniform, positive(v[0], field + ".uniform[0]"), positive(v[1], field + ".uniform[1]")};
    if (l.b < l.a) fail_at(file, v, field + ".uniform", "max must not be below min");
  } else {
    const MapReader m(file, v, field + ".lognormal", {"mean", "sigma"});
    if (!m.has("mean")) m.fail("mean", "is required (tokens)");
    l = {Lengths::Kind::lognormal, m.number("mean", 0, 1 - 1e-12), m.number("sigma", 0.5, -1e-300)};
  }
  return l;
}

Workload read_workload(const std::string& file, const YAML::Node& node) {
  const MapReader r(file, node, "workload",
                    {"arrival", "prompt_tokens", "output_tokens", "prefix_hit_rate", "shared_prefix", "expert_load",
                     "duration_s", "requests", "warmup_s", "timeout_s", "seed"});
  Workload w;
  if (!r.has("arrival")) r.fail("arrival", "is required: {poisson: RATE}, {gamma: {rate, cv}}, {closed: N} or {trace: FILE}");
  const YAML::Node a = r.get("arrival");
  const std::string kind = one_of(file, a, "workload.arrival", {"poisson", "gamma", "closed", "trace"});
  const YAML::Node v = a[kind];
  const std::string field = "workload.arrival." + kind;
  const MapReader holder(file, a, "workload.arrival", {kind});
  if (kind == "poisson") {
    w.arrival.kind = Arrival::Kind::poisson;
    w.arrival.rate = holder.number("poisson", 0, 0);
  } else if (kind == "gamma") {
    const MapReader g(file, v, field, {"rate", "cv"});
    if (!g.has("rate")) g.fail("rate", "is required (requests/s)");
    w.arrival.kind = Arrival::Kind::gamma;
    w.arrival.rate = g.number("rate", 0, 0);
    w.arrival.cv = g.number("cv", 1, 0);
  } else if (kind == "closed") {
    w.arrival.kind = Arrival::Kind::closed;
    if (v.IsMap()) {
      const MapReader g(file, v, field, {"clients", "think_s", "lengths_from"});
      if (!g.has("clients")) g.fail("clients", "is required (concurrent clients)");
      w.arrival.clients = int32_t(g.integer("clients", 1, 1, 1 << 24));
      w.arrival.think_s = g.number("think_s", 0, -1e-300);
      if (g.has("lengths_from")) {
        w.arrival.trace_file = resolve_path(file, g.text("lengths_from", ""));
        if (w.arrival.trace_file.empty()) g.fail("lengths_from", "must name a file");
      }
    } else {
      w.arrival.clients = int32_t(holder.integer("closed", 1, 1, 1 << 24));
    }
  } else {
    w.arrival.kind = Arrival::Kind::trace;
    w.arrival.trace_file = resolve_path(file, holder.text("trace", ""));
    if (w.arrival.trace_file.empty()) fail_at(file, v, field, "must name a file");
  }
  const bool trace = !w.arrival.trace_file.empty();
  const Lengths from_trace{Lengths::Kind::trace, 0, 0};
  w.prompt_tokens = read_lengths(file, r, "prompt_tokens", trace ? from_trace : Lengths{Lengths::Kind::fixed, 1024, 0});
  w.output_tokens = read_lengths(file, r, "output_tokens", trace ? from_trace : Lengths{Lengths::Kind::fixed, 128, 0});
  w.prefix_hit_rate = r.number("prefix_hit_rate", 0, -1e-300);
  if (w.prefix_hit_rate >= 1) r.fail("prefix_hit_rate", "must be in [0, 1)");
  if (r.has("shared_prefix")) {
    const MapReader s(file, r.get("shared_prefix"), r.field("shared_prefix"), {"groups", "tokens"});
    if (!s.has("groups") || !s.has("tokens")) s.fail("", "needs groups and tokens");
    w.prefix_groups = int32_t(s.integer("groups", 0, 1, 1 << 20));
    w.prefix_tokens = s.integer("tokens", 0, 1, int64_t(1) << 24);
    if (w.prefix_hit_rate > 0) r.fail("shared_prefix", "and prefix_hit_rate exclude each other");
  }
  if (r.has("expert_load")) {
    const YAML::Node e = r.get("expert_load");
    const std::string ek = one_of(file, e, "workload.expert_load", {"skew", "trace"});
    const MapReader er(file, e, "workload.expert_load", {ek});
    if (ek == "skew") w.expert_skew = er.number("skew", 1, -1e-300);
    else w.expert_trace = resolve_path(file, er.text("trace", ""));
  }
  w.duration_s = r.number("duration_s", 0, -1e-300);
  w.requests = r.integer("requests", 0, 0, int64_t(1) << 40);
  if (!trace && w.duration_s == 0 && w.requests == 0)
    r.fail("duration_s", "or requests is required: when arrivals stop");
  w.warmup_s = r.number("warmup_s", 0, -1e-300);
  if (w.duration_s > 0 && w.warmup_s >= w.duration_s) r.fail("warmup_s", "must be shorter than duration_s");
  w.timeout_s = r.number("timeout_s", 0, -1e-300);
  w.seed = uint64_t(r.integer("seed", 1, 0, int64_t(1) << 62));
  return w;
}

}  // namespace

SimConfig read_config(const std::string& path, const YAML::Node& root, const ModelFileReader& read_model_file) {
  const MapReader r(path, root, "", {"description", "hardware", "model", "precision", "deployment", "workload", "slo"});
  for (const char* key : {"hardware", "model", "deployment", "workload"})
    if (!r.has(key)) r.fail(key, "is required");
  SimConfig c;
  c.file = path;
  c.hardware = hardware_of(path, r.get("hardware"));
  c.model = model_of(path, r.get("model"), read_model_file);
  c.precision = read_precision(path, r.get("precision"), "precision");

  const MapReader d(path, r.get("deployment"), "deployment",
                    {"prefill", "decode", "unified", "policy", "kv_transfer", "micro_batches", "mtp"});
  Deployment& dep = c.deployment;
  if (d.has("unified")) {
    if (d.has("prefill") || d.has("decode")) d.fail("unified", "excludes prefill and decode pools");
    dep.unified = read_pool(path, d, "unified", c);
  } else {
    if (!d.has("prefill") || !d.has("decode")) d.fail("", "needs prefill and decode pools, or a unified one");
    dep.prefill = read_pool(path, d, "prefill", c);
    dep.decode = read_pool(path, d, "decode", c);
  }
  const std::string policy = d.text("policy", "cost");
  try {
    dep.policy = routing::parse_policy_name(policy);
  } catch (const Error& e) {
    fail_at(path, d.get("policy"), d.field("policy"), e.what());
  }
  dep.kv_over_scale_up = d.choice("kv_transfer", "scale_out", {"scale_up", "scale_out"}) == "scale_up";
  dep.micro_batches = int32_t(d.integer("micro_batches", 1, 1, 2));
  if (d.has("mtp")) {
    const MapReader m(path, d.get("mtp"), d.field("mtp"), {"draft_tokens", "acceptance"});
    dep.mtp.draft_tokens = int32_t(m.integer("draft_tokens", 1, 0, 8));
    dep.mtp.acceptance = m.number("acceptance", 0.8, -1e-300);
    if (dep.mtp.acceptance > 1) m.fail("acceptance", "must be in [0, 1]");
    if (dep.mtp.draft_tokens > 0 && c.model.mtp_layers == 0)
      m.fail("draft_tokens", fmt::format("model {} has no MTP layer", c.model.name));
    if (dep.mtp.draft_tokens > 0 && dep.unified)
      m.fail("draft_tokens", "speculative decoding is simulated on decode pools only, not on unified instances");
  }
  c.workload = read_workload(path, r.get("workload"));
  const MapReader s(path, r.get("slo"), "slo", {"ttft_s", "tpot_s"});
  c.slo = Slo{s.number("ttft_s", 0, -1e-300), s.number("tpot_s", 0, -1e-300)};
  return c;
}

SimConfig read_config(const std::string& path, const ModelFileReader& read_model_file) {
  return read_config(path, load_config_tree(path), read_model_file);
}

}  // namespace moe::sim
