#include "report.h"

#include <fmt/format.h>

namespace moe::bench {

namespace {

using Json = nlohmann::json;

std::string times(double a, double b) {
  const double x = ratio(a, b);
  return x > 0 ? fmt::format("{:.2f}x", x) : "n/a";
}

std::string rate_cell(const std::vector<Step>& ramp) {
  const Step* s = best_held(ramp);
  return s ? fmt::format("{:.0f} (c={})", s->rate, s->concurrency) : "none held";
}

double best_rate(const std::vector<Step>& ramp) {
  const Step* s = best_held(ramp);
  return s ? s->rate : 0;
}

// The highest legs per request over a target's runs: 1 for a single hop, 2 for P/D.
double legs(const TargetResult& t) {
  double most = 0;
  for (Kind k : kKinds) {
    most = std::max(most, t.latency[size_t(k)].legs_per_request);
    for (const Step& s : t.ramp[size_t(k)]) most = std::max(most, s.legs_per_request);
  }
  return most;
}

Json step_json(const Step& s) {
  return {{"concurrency", s.concurrency}, {"answers", s.answers},     {"errors", s.errors},
          {"rate", s.rate},               {"p50_ms", s.latency.p50_ms}, {"p99_ms", s.latency.p99_ms},
          {"legs_per_request", s.legs_per_request}, {"held", s.held}};
}

}  // namespace

void print_report(const Results& r, std::FILE* out) {
  const TargetResult& nginx = r.nginx();
  fmt::print(out, "\nProxy overhead: moengine proxy vs {} in front of the same stub ({} tokens per answer, {} threads each)\n",
             r.peer, r.output_tokens, r.threads);

  fmt::print(out, "\nLatency at 1 connection, {} requests each, the targets taking turns (ms; streamed: to the last byte)\n", r.requests);
  fmt::print(out, "{:<20} {:>10} {:>10} {:>13} {:>13} {:>13}\n", "target", "whole p50", "whole p99", "streamed p50",
             "streamed p99", "legs/request");
  for (const TargetResult& t : r.targets) {
    const Step &w = t.latency[0], &s = t.latency[1];
    fmt::print(out, "{:<20} {:>10.3f} {:>10.3f} {:>13.3f} {:>13.3f} {:>13.2f}\n", t.name, w.latency.p50_ms, w.latency.p99_ms,
               s.latency.p50_ms, s.latency.p99_ms, legs(t));
  }

  fmt::print(out, "\nAdded latency over direct (ms; in brackets: times nginx's)\n");
  fmt::print(out, "{:<20} {:>18} {:>18} {:>18} {:>18}\n", "target", "whole p50", "whole p99", "streamed p50", "streamed p99");
  for (size_t i = 1; i < r.targets.size(); ++i) {
    const TargetResult& t = r.targets[i];
    std::string cells;
    for (Kind k : kKinds) {
      const Percentiles a = added_latency(r, t, k), n = added_latency(r, nginx, k);
      for (auto [mine, theirs] : {std::pair{a.p50_ms, n.p50_ms}, std::pair{a.p99_ms, n.p99_ms}}) {
        cells += fmt::format(" {:>18}", i == 1 ? fmt::format("{:.3f}", mine) : fmt::format("{:.3f} ({})", mine, times(mine, theirs)));
      }
    }
    fmt::print(out, "{:<20}{}\n", t.name, cells);
  }

  fmt::print(out, "\nHighest request rate held (req/s; no errors and p99 <= {:g} ms; closed loop, {:g} s per concurrency)\n",
             r.p99_bound_ms, r.duration_s);
  fmt::print(out, "{:<20} {:>18} {:>10} {:>18} {:>10}\n", "target", "whole", "x nginx", "streamed", "x nginx");
  for (const TargetResult& t : r.targets) {
    fmt::print(out, "{:<20} {:>18} {:>10} {:>18} {:>10}\n", t.name, rate_cell(t.ramp[0]),
               times(best_rate(t.ramp[0]), best_rate(nginx.ramp[0])), rate_cell(t.ramp[1]),
               times(best_rate(t.ramp[1]), best_rate(nginx.ramp[1])));
  }

  const TargetResult& unified = r.targets.at(2);
  std::string verdict;
  bool met = true;
  for (Kind k : kKinds) {
    const Percentiles a = added_latency(r, unified, k), n = added_latency(r, nginx, k);
    const double p50 = ratio(a.p50_ms, n.p50_ms), p99 = ratio(a.p99_ms, n.p99_ms);
    met = met && p50 > 0 && p50 <= 2 && p99 > 0 && p99 <= 2;
    verdict += fmt::format("{}{} p50 {}, p99 {}", verdict.empty() ? "" : "; ", kind_name(k), times(a.p50_ms, n.p50_ms),
                           times(a.p99_ms, n.p99_ms));
  }
  fmt::print(out, "\nmoengine (unified) added latency / nginx's: {} (target <= 2x: {})\n", verdict, met ? "met" : "not met");

  // One proxy, its dashboard state polled in every other block; the quiet blocks' two
  // halves against each other give the run's noise on the same figures.
  const DashboardAb& ab = r.dashboard;
  fmt::print(out, "\nDashboard A/B: one unified proxy, its state polled every {} ms in {} blocks of {} requests and quiet in {} "
             "(added latency over direct, ms)\n", ab.poll_ms, ab.blocks, ab.block_requests, ab.blocks);
  fmt::print(out, "{:<10} {:>8} {:>24} {:>24} {:>22}\n", "", "polls", "polled / quiet p50", "polled / quiet p99",
             "quiet halves p50, p99");
  for (Kind k : kKinds) {
    const size_t i = size_t(k);
    const Percentiles &a = ab.polled[i], &b = ab.quiet[i], &qa = ab.quiet_a[i], &qb = ab.quiet_b[i];
    fmt::print(out, "{:<10} {:>8} {:>24} {:>24} {:>22}\n", kind_name(k), ab.polls[i],
               fmt::format("{:.3f} / {:.3f} ({})", a.p50_ms, b.p50_ms, times(a.p50_ms, b.p50_ms)),
               fmt::format("{:.3f} / {:.3f} ({})", a.p99_ms, b.p99_ms, times(a.p99_ms, b.p99_ms)),
               fmt::format("{}, {}", times(qa.p50_ms, qb.p50_ms), times(qa.p99_ms, qb.p99_ms)));
  }

  for (const TargetResult& t : r.targets) {
    if (!t.first_error.empty()) fmt::print(out, "errors via {}: first one: {}\n", t.name, t.first_error);
  }
}

Json to_json(const Results& r) {
  Json targets = Json::array();
  for (const TargetResult& t : r.targets) {
    Json j{{"name", t.name}};
    for (Kind k : kKinds) {
      Json kind{{"latency", step_json(t.latency[size_t(k)])}};
      const Percentiles added = added_latency(r, t, k);
      kind["added_p50_ms"] = added.p50_ms;
      kind["added_p99_ms"] = added.p99_ms;
      Json ramp = Json::array();
      for (const Step& s : t.ramp[size_t(k)]) ramp.push_back(step_json(s));
      kind["ramp"] = std::move(ramp);
      const Step* best = best_held(t.ramp[size_t(k)]);
      kind["max_rate_held"] = best ? best->rate : 0;
      kind["max_rate_concurrency"] = best ? best->concurrency : 0;
      // Ratios to nginx's figures; 0 where nginx's is not positive.
      const Percentiles nginx_added = added_latency(r, r.nginx(), k);
      kind["added_p50_x_nginx"] = ratio(added.p50_ms, nginx_added.p50_ms);
      kind["added_p99_x_nginx"] = ratio(added.p99_ms, nginx_added.p99_ms);
      kind["max_rate_x_nginx"] = ratio(best_rate(t.ramp[size_t(k)]), best_rate(r.nginx().ramp[size_t(k)]));
      j[kind_name(k)] = std::move(kind);
    }
    if (!t.first_error.empty()) j["first_error"] = t.first_error;
    targets.push_back(std::move(j));
  }
  Json ab{{"blocks", r.dashboard.blocks}, {"block_requests", r.dashboard.block_requests}, {"poll_ms", r.dashboard.poll_ms}};
  for (Kind k : kKinds) {
    const Percentiles &a = r.dashboard.polled[size_t(k)], &b = r.dashboard.quiet[size_t(k)];
    const Percentiles &qa = r.dashboard.quiet_a[size_t(k)], &qb = r.dashboard.quiet_b[size_t(k)];
    ab[kind_name(k)] = {{"polled_added_p50_ms", a.p50_ms}, {"polled_added_p99_ms", a.p99_ms},
                        {"quiet_added_p50_ms", b.p50_ms},  {"quiet_added_p99_ms", b.p99_ms},
                        {"quiet_half_a_added_p50_ms", qa.p50_ms}, {"quiet_half_a_added_p99_ms", qa.p99_ms},
                        {"quiet_half_b_added_p50_ms", qb.p50_ms}, {"quiet_half_b_added_p99_ms", qb.p99_ms},
                        {"polls", r.dashboard.polls[size_t(k)]}};
  }
  return {{"peer", r.peer},
          {"dashboard_ab", std::move(ab)},
          {"threads", r.threads},
          {"output_tokens", r.output_tokens},
          {"requests", r.requests},
          {"duration_s", r.duration_s},
          {"p99_bound_ms", r.p99_bound_ms},
          {"targets", std::move(targets)}};
}

}  // namespace moe::bench
