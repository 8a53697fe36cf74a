#include "engine/draft_length.h"

#include <algorithm>

namespace moe {

int32_t DraftLength::choose(int32_t max_k, int64_t n_seqs) {
  if (max_k <= 0) return 0;
  const double a = acceptance(), c = cost(n_seqs);
  int32_t best = 0;
  double best_rate = 1.0, tokens = 1.0, a_pow = 1.0;
  for (int32_t k = 1; k <= max_k; ++k) {
    a_pow *= a;
    tokens += a_pow;
    const double rate = tokens / (1.0 + c * double(k));
    if (rate > best_rate) best = k, best_rate = rate;
  }
  probing_ = false;
  if (best > 0) return best;
  if (++steps_without_ < probe_wait_) return 0;
  steps_without_ = 0;
  probing_ = true;
  return 1;
}

void DraftLength::observe(int32_t drafted, int32_t accepted) {
  if (drafted <= 0) return;
  accepted_ = kDecay * accepted_ + double(accepted);
  rejected_ = kDecay * rejected_ + (accepted < drafted ? 1.0 : 0.0);
  steps_without_ = 0;
  if (accepted > 0) probe_wait_ = kProbeFirst;
  else if (probing_) probe_wait_ = std::min(2 * probe_wait_, kProbeLast);
  probing_ = false;
}

}  // namespace moe
