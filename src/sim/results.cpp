#include "sim/results.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace moe::sim {

namespace {

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  p.count = int64_t(v.size());
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / double(v.size());
  // Nearest rank on the sorted values, as bench serve's percentiles (linear between ranks).
  auto at = [&](double q) {
    const double pos = q * double(v.size() - 1);
    const size_t lo = size_t(std::floor(pos));
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
  };
  p.p50 = at(0.5);
  p.p90 = at(0.9);
  p.p99 = at(0.99);
  return p;
}

nlohmann::json percentile_json(const Percentiles& p) {
  return {{"mean", p.mean}, {"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"count", p.count}};
}

double tpot(const SimRequest& r) {
  return (r.finish_s - r.first_token_s) / double(r.spec.output_tokens - 1);
}

}  // namespace

Summary summarize(const SimConfig& c, const SimResult& res) {
  Summary s;
  s.window_s = std::max(0.0, res.window_end_s - res.window_begin_s);
  std::vector<double> ttft, tpots, e2e;
  double speed_sum = 0;
  int64_t speed_n = 0, good = 0;
  for (const SimRequest& r : res.requests) {
    ++s.arrived;
    s.preemptions += r.preemptions;
    if (r.rejected) {
      ++s.rejected;
      continue;
    }
    if (r.finish_s < 0) continue;
    ++s.completed;
    ttft.push_back(r.first_token_s - r.spec.arrival_s);
    e2e.push_back(r.finish_s - r.spec.arrival_s);
    bool meets = c.slo.ttft_s <= 0 || ttft.back() <= c.slo.ttft_s;
    if (r.spec.output_tokens > 1) {
      tpots.push_back(tpot(r));
      if (tpots.back() > 0) {
        speed_sum += 1 / tpots.back();
        ++speed_n;
      }
      meets = meets && (c.slo.tpot_s <= 0 || tpots.back() <= c.slo.tpot_s);
    }
    if (meets && r.spec.arrival_s >= res.window_begin_s && r.spec.arrival_s <= res.window_end_s) ++good;
  }
  s.ttft_s = percentiles(ttft);
  s.tpot_s = percentiles(tpots);
  s.e2e_s = percentiles(e2e);
  s.tokens_per_s_per_user = speed_n > 0 ? speed_sum / double(speed_n) : 0;
  s.goodput_rps = s.window_s > 0 ? double(good) / s.window_s : 0;
  return s;
}

nlohmann::json to_json(const SimConfig& c, const SimResult& res, const Summary& s) {
  nlohmann::json j;
  j["config"] = c.file;
  j["hardware"] = c.hardware.name;
  j["model"] = c.model.name;
  j["policy"] = std::string(routing::policy_name(c.deployment.policy));
  const double window = std::max(s.window_s, 1e-12);
  for (const PoolResult& p : res.pools) {
    nlohmann::json b;
    b["instances"] = p.instances;
    b["devices"] = p.devices;
    b["nodes"] = p.nodes;
    b["attention_ranks_per_instance"] = p.ranks_per_instance;
    b["kv_capacity_tokens_per_rank"] = p.kv_capacity_tokens_per_rank;
    b["weight_gib_per_device"] = p.weight_gib_per_device;
    b["utilisation"] = p.busy_fraction;
    b["steps"] = p.steps;
    const StepBreakdown& m = p.mean_step;
    b["mean_step_s"] = {{"total", m.total}, {"dense_layers", m.dense_layers}, {"moe_layers", m.moe_layers},
                        {"experts", m.experts}, {"comm", m.comm}, {"lm_head", m.lm_head}, {"mtp_draft", m.draft},
                        {"overhead", m.overhead}};
    b["expert_balance"] = {{"planner", p.balance.planner}, {"balance", p.balance.balance},
                           {"max_layer_imbalance", p.balance.imbalance.empty() ? 1.0
                               : *std::max_element(p.balance.imbalance.begin(), p.balance.imbalance.end())}};
    if (p.name != "decode") {
      b["input_tokens_per_s"] = p.input_tokens / window;
      b["input_tokens_per_s_per_device"] = p.input_tokens / window / p.devices;
      b["input_tokens_per_s_per_node"] = p.input_tokens / window / p.nodes;
    }
    if (p.name != "prefill") {
      b["output_tokens_per_s"] = p.output_tokens / window;
      b["output_tokens_per_s_per_device"] = p.output_tokens / window / p.devices;
      b["output_tokens_per_s_per_node"] = p.output_tokens / window / p.nodes;
      b["tokens_per_s_per_user"] = s.tokens_per_s_per_user;
    }
    if (p.name == "decode") b["mean_running_per_rank"] = p.mean_running_per_rank;
    j[p.name] = b;
  }
  j["ttft_s"] = percentile_json(s.ttft_s);
  j["tpot_s"] = percentile_json(s.tpot_s);
  j["e2e_s"] = percentile_json(s.e2e_s);
  j["goodput_rps"] = s.goodput_rps;
  j["slo"] = {{"ttft_s", c.slo.ttft_s}, {"tpot_s", c.slo.tpot_s}};
  j["requests"] = {{"arrived", s.arrived}, {"completed", s.completed}, {"rejected", s.rejected},
                   {"preemptions", s.preemptions}};
  j["routing"] = res.routing;
  j["window_s"] = {res.window_begin_s, res.window_end_s};
  j["simulation"] = {{"simulated_s", res.end_s}, {"wall_s", res.wall_s}, {"events", res.events},
                     {"simulated_per_wall", res.wall_s > 0 ? res.end_s / res.wall_s : 0.0}};
  j["at_end"] = {{"prefill_blocks_in_use", res.blocks_in_use_at_end}, {"decode_kv_tokens", res.decode_kv_tokens_at_end},
                 {"sequences", res.sequences_at_end}, {"stalled_requests", res.stalled}};
  return j;
}

std::string to_table(const SimConfig& c, const SimResult& res, const Summary& s) {
  std::string out;
  const double window = std::max(s.window_s, 1e-12);
  out += fmt::format("moengine sim: {} on {}, policy {}, {:.0f} s simulated in {:.2f} s ({} events)\n", c.model.name,
                     c.hardware.name, routing::policy_name(c.deployment.policy), res.end_s, res.wall_s, res.events);
  out += fmt::format("{:<9} {:>5} {:>7} {:>7} {:>14} {:>12} {:>12} {:>7} {:>9}\n", "pool", "inst", "devices", "nodes",
                     "tok/s", "tok/s/device", "tok/s/node", "busy", "balance");
  for (const PoolResult& p : res.pools) {
    const double tokens = p.name == "prefill" ? p.input_tokens : p.output_tokens;
    out += fmt::format("{:<9} {:>5} {:>7} {:>7.1f} {:>14.1f} {:>12.1f} {:>12.1f} {:>6.0f}% {:>9.3f}\n",
                       p.name + (p.name == "prefill" ? " in" : " out"), p.instances, p.devices, p.nodes, tokens / window,
                       tokens / window / p.devices, tokens / window / p.nodes, 100 * p.busy_fraction, p.balance.balance);
  }
  for (const PoolResult& p : res.pools) {
    const StepBreakdown& m = p.mean_step;
    out += fmt::format("{} mean step {:.2f} ms: dense layers {:.2f}, MoE layers {:.2f} (experts {:.2f}, all-to-all {:.2f}), "
                       "LM head {:.2f}, MTP {:.2f}, overhead {:.2f}\n",
                       p.name, m.total * 1e3, m.dense_layers * 1e3, m.moe_layers * 1e3, m.experts * 1e3, m.comm * 1e3,
                       m.lm_head * 1e3, m.draft * 1e3, m.overhead * 1e3);
  }
  out += fmt::format("requests: {} arrived, {} completed, {} rejected, {} preemptions\n", s.arrived, s.completed,
                     s.rejected, s.preemptions);
  auto line = [&](const char* name, const Percentiles& p, double scale, const char* unit) {
    out += fmt::format("{:<6} mean {:>9.2f} p50 {:>9.2f} p90 {:>9.2f} p99 {:>9.2f} {}\n", name, p.mean * scale,
                       p.p50 * scale, p.p90 * scale, p.p99 * scale, unit);
  };
  line("TTFT", s.ttft_s, 1e3, "ms");
  line("TPOT", s.tpot_s, 1e3, "ms");
  line("E2E", s.e2e_s, 1, "s");
  out += fmt::format("tokens/s per user {:.1f}; goodput {:.3f} req/s (TTFT <= {} s, TPOT <= {} s)\n",
                     s.tokens_per_s_per_user, s.goodput_rps, c.slo.ttft_s, c.slo.tpot_s);
  return out;
}

}  // namespace moe::sim
