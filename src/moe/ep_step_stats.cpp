#include "moe/ep_step_stats.h"

#include <fmt/format.h>

#include <algorithm>

#include "moe/expert_load.h"

namespace moe {

namespace {

double imbalance(const std::vector<std::vector<int64_t>>& rank_pairs, int64_t first_step, int64_t begin, int64_t end,
                 int64_t layers, int32_t ranks) {
  std::vector<int64_t> sums(size_t(layers * ranks), 0);
  for (int64_t t = std::max(begin, first_step); t < end; ++t) {
    const std::vector<int64_t>& row = rank_pairs[size_t(t - first_step)];
    for (size_t j = 0; j < sums.size(); ++j) sums[j] += row[j];
  }
  return layer_imbalance(sums, layers, ranks);
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  const size_t i = std::min(v.size() - 1, size_t(q * double(v.size())));
  std::nth_element(v.begin(), v.begin() + ptrdiff_t(i), v.end());
  return v[i];
}

EpStepTimes times_of(const std::vector<double>& ms) {
  return {int64_t(ms.size()), percentile(ms, 0.5), percentile(ms, 0.9), percentile(ms, 1.0)};
}

}  // namespace

EpRunSummary summarize_run(const std::vector<EpStepRecord>& steps, const std::vector<int64_t>& switch_steps,
                           const std::vector<std::vector<int64_t>>& rank_pairs, int64_t layers, int32_t ranks,
                           uint64_t bytes_moved) {
  EpRunSummary s;
  s.steps = int64_t(steps.size());
  s.switches = int64_t(switch_steps.size());
  s.bytes_moved = bytes_moved;
  std::vector<double> ms, copying, other, decode, decode_copying, decode_other;
  for (const EpStepRecord& r : steps) {
    ms.push_back(r.ms);
    (r.copying ? copying : other).push_back(r.ms);
    if (r.prefilling) continue;
    decode.push_back(r.ms);
    (r.copying ? decode_copying : decode_other).push_back(r.ms);
  }
  s.median_ms = percentile(ms, 0.5);
  s.copying = times_of(copying);
  s.other = times_of(other);
  s.decode = times_of(decode);
  s.decode_copying = times_of(decode_copying);
  s.decode_other = times_of(decode_other);
  const int64_t first = s.steps - int64_t(rank_pairs.size());
  if (switch_steps.empty()) {
    s.imbalance_before = imbalance(rank_pairs, first, 0, s.steps, layers, ranks);
  } else {
    s.imbalance_before = imbalance(rank_pairs, first, 0, switch_steps.front(), layers, ranks);
    s.imbalance_after = imbalance(rank_pairs, first, switch_steps.back(), s.steps, layers, ranks);
  }
  return s;
}

namespace {

// "outside copies p90 1.40 ms (1.17x), longest 2.00 ms (1.67x); 12 steps during copies, ..."
std::string split_by_copies(const EpStepTimes& other, const EpStepTimes& copying, double median_ms) {
  const auto x = [&](double ms) { return median_ms > 0 ? ms / median_ms : 0.0; };
  std::string out = fmt::format("outside copies p90 {:.2f} ms ({:.2f}x), longest {:.2f} ms ({:.2f}x)", other.p90_ms,
                                x(other.p90_ms), other.max_ms, x(other.max_ms));
  if (copying.steps > 0) {
    out += fmt::format("; {} steps during copies, p90 {:.2f} ms ({:.2f}x), longest {:.2f} ms ({:.2f}x)", copying.steps,
                       copying.p90_ms, x(copying.p90_ms), copying.max_ms, x(copying.max_ms));
  }
  return out;
}

}  // namespace

std::string describe(const EpRunSummary& s) {
  std::string out = fmt::format("ep: {} steps, median {:.2f} ms; {}", s.steps, s.median_ms,
                                split_by_copies(s.other, s.copying, s.median_ms));
  if (s.decode.steps > 0) {
    out += fmt::format("; {} decode-only steps, median {:.2f} ms; {}", s.decode.steps, s.decode.median_ms,
                       split_by_copies(s.decode_other, s.decode_copying, s.decode.median_ms));
  }
  out += fmt::format("; {} re-placements, {:.1f} MiB of expert weights moved", s.switches,
                     double(s.bytes_moved) / 1048576.0);
  out += fmt::format("; load max/mean over ranks, per layer {:.3f}", s.imbalance_before);
  if (s.switches > 0) out += fmt::format(" before the first re-placement, {:.3f} after the last", s.imbalance_after);
  return out;
}

}  // namespace moe
