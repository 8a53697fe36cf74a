#include "engine/draft_length.h"

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
  if (best > 0) return best;
  if (++steps_without_ < kProbeEvery) return 0;
  steps_without_ = 0;
  return 1;
}

void DraftLength::observe(int32_t drafted, int32_t accepted) {
  if (drafted <= 0) return;
  accepted_ = kDecay * accepted_ + double(accepted);
  rejected_ = kDecay * rejected_ + (accepted < drafted ? 1.0 : 0.0);
  prior_ *= kDecay;
  steps_without_ = 0;
}

}  // namespace moe
