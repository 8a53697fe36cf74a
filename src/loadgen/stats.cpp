#include "loadgen/stats.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"

namespace moe::loadgen {

double time_per_output_token_s(const RequestResult& r) {
  if (r.output_tokens <= 1) return 0.0;
  return (r.e2e_s - r.ttft_s) / double(r.output_tokens - 1);
}

Slo parse_slo(const std::vector<std::string>& items) {
  Slo slo;
  for (const std::string& item : items) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos)
      fail("--goodput: '{}' is not NAME:MILLISECONDS (names: ttft, tpot, e2el)", item);
    const std::string name = item.substr(0, colon), value = item.substr(colon + 1);
    double ms = 0;
    size_t used = 0;
    try {
      ms = std::stod(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != value.size() || !std::isfinite(ms) || ms <= 0)
      fail("--goodput: '{}' needs a positive number of milliseconds after the colon", item);
    if (name == "ttft") {
      slo.ttft_ms = ms;
    } else if (name == "tpot") {
      slo.tpot_ms = ms;
    } else if (name == "e2el" || name == "e2e") {
      slo.e2el_ms = ms;
    } else {
      fail("--goodput: unknown objective '{}' in '{}' (names: ttft, tpot, e2el)", name, item);
    }
  }
  return slo;
}

bool meets(const RequestResult& r, const Slo& slo) {
  if (!r.success) return false;
  if (slo.ttft_ms && r.ttft_s * 1e3 > *slo.ttft_ms) return false;
  if (slo.tpot_ms && time_per_output_token_s(r) * 1e3 > *slo.tpot_ms) return false;
  if (slo.e2el_ms && r.e2e_s * 1e3 > *slo.e2el_ms) return false;
  return true;
}

double percentile(std::span<const double> sorted, double p) {
  if (sorted.empty()) return 0.0;
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * double(sorted.size() - 1);
  const size_t lo = size_t(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - double(lo));
}

Distribution describe(std::vector<double> values, std::span<const double> percentiles) {
  Distribution d;
  d.count = values.size();
  std::sort(values.begin(), values.end());
  if (!values.empty()) {
    double sum = 0;
    for (double v : values) sum += v;
    d.mean = sum / double(values.size());
    double sq = 0;
    for (double v : values) sq += (v - d.mean) * (v - d.mean);
    d.stddev = std::sqrt(sq / double(values.size()));
    d.median = percentile(values, 50);
  }
  for (double p : percentiles) d.percentiles.emplace_back(p, percentile(values, p));
  return d;
}

int64_t peak_concurrency(std::span<const RequestResult> results) {
  // Ends sort before starts at the same instant: a request that finishes as another
  // begins does not overlap it.
  std::vector<std::pair<double, int>> edges;
  edges.reserve(results.size() * 2);
  for (const RequestResult& r : results) {
    edges.emplace_back(r.start_s, +1);
    edges.emplace_back(r.start_s + r.e2e_s, -1);
  }
  std::sort(edges.begin(), edges.end());
  int64_t now = 0, peak = 0;
  for (const auto& [t, delta] : edges) {
    now += delta;
    peak = std::max(peak, now);
  }
  return peak;
}

double peak_chunk_rate(std::span<const RequestResult> results) {
  std::map<int64_t, int64_t> per_second;
  for (const RequestResult& r : results) {
    if (!r.success || r.output_tokens == 0) continue;
    double t = r.start_s + r.ttft_s;
    ++per_second[int64_t(std::floor(t))];
    for (double gap : r.itl_s) {
      t += gap;
      ++per_second[int64_t(std::floor(t))];
    }
  }
  int64_t peak = 0;
  for (const auto& [second, n] : per_second) peak = std::max(peak, n);
  return double(peak);
}

Summary summarize(std::span<const RequestResult> results, double duration_s, std::span<const double> percentiles,
                  const Slo& slo) {
  Summary s;
  s.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2el;
  int64_t good = 0;
  for (const RequestResult& r : results) {
    if (!r.success) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    s.total_input_tokens += r.prompt_tokens;
    s.total_output_tokens += r.output_tokens;
    s.total_draft_tokens += r.accepted_draft_tokens + r.rejected_draft_tokens;
    s.total_accepted_draft_tokens += r.accepted_draft_tokens;
    ttft.push_back(r.ttft_s * 1e3);
    if (r.output_tokens > 1) tpot.push_back(time_per_output_token_s(r) * 1e3);
    for (double gap : r.itl_s) itl.push_back(gap * 1e3);
    e2el.push_back(r.e2e_s * 1e3);
    if (meets(r, slo)) ++good;
  }
  const double per_s = duration_s > 0 ? 1.0 / duration_s : 0.0;
  s.request_throughput = double(s.completed) * per_s;
  s.output_throughput = double(s.total_output_tokens) * per_s;
  s.total_token_throughput = double(s.total_input_tokens + s.total_output_tokens) * per_s;
  if (!slo.empty()) {
    s.good_requests = good;
    s.request_goodput = double(good) * per_s;
    s.goodput_fraction = results.empty() ? 0.0 : double(good) / double(results.size());
  }
  s.peak_output_throughput = peak_chunk_rate(results);
  s.peak_concurrent_requests = peak_concurrency(results);
  s.ttft_ms = describe(std::move(ttft), percentiles);
  s.tpot_ms = describe(std::move(tpot), percentiles);
  s.itl_ms = describe(std::move(itl), percentiles);
  s.e2el_ms = describe(std::move(e2el), percentiles);
  return s;
}

}  // namespace moe::loadgen
