#include "engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace moe {

namespace {

// Below this temperature a request is greedy, as in vLLM (_SAMPLING_EPS): dividing by a
// near-zero temperature would overflow to inf and turn the draw into NaNs.
constexpr float kGreedyBelow = 1e-5f;

// Candidate order: larger logit first, ties by smaller token id, so every selection and the
// walk of the draw are fully determined by the logits (reproducible with a seed).
struct Higher {
  const float* z;
  bool operator()(int32_t a, int32_t b) const { return z[a] > z[b] || (z[a] == z[b] && a < b); }
};

}  // namespace

void SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) fail("temperature must be a finite number >= 0, got {}", temperature);
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail("top_p must be in (0, 1], got {}", top_p);
  if (top_k < -1) fail("top_k must be -1 or 0 (off) or at least 1, got {}", top_k);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) fail("min_p must be in [0, 1], got {}", min_p);
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    fail("repetition_penalty must be a finite number > 0, got {}", repetition_penalty);
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) fail("presence_penalty must be in [-2, 2], got {}", presence_penalty);
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) fail("frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  if (top_logprobs < 0 || top_logprobs > 20) fail("top_logprobs must be in [0, 20], got {}", top_logprobs);
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0) fail("logit_bias token id {} is negative", token);
    if (!(bias >= -100.0f && bias <= 100.0f)) fail("logit_bias for token {} must be in [-100, 100], got {}", token, bias);
  }
  if (top_logprobs > 0 && !logprobs) fail("top_logprobs requires logprobs to be true, got top_logprobs {} without it", top_logprobs);
}

int32_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return int32_t(best);
}

Sampler::Sampler(const SamplingParams& params, std::span<const int32_t> prompt) : params_(params) {
  params_.validate();
  rng_.seed(params_.seed ? *params_.seed : (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}());
  // Only the repetition penalty reads the prompt; keep nothing otherwise.
  if (params_.repetition_penalty != 1.0f) {
    prompt_tokens_.assign(prompt.begin(), prompt.end());
    std::sort(prompt_tokens_.begin(), prompt_tokens_.end());
    prompt_tokens_.erase(std::unique(prompt_tokens_.begin(), prompt_tokens_.end()), prompt_tokens_.end());
  }
}

void Sampler::accept(int32_t token) {
  if (token < 0) fail("Sampler::accept: token {} is negative", token);
  if (params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    ++output_counts_[token];
  }
}

bool Sampler::has_penalties() const {
  return (params_.repetition_penalty != 1.0f && (!prompt_tokens_.empty() || !output_counts_.empty())) ||
         ((params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) && !output_counts_.empty());
}

// Touches only the tokens seen so far, not the whole vocabulary. Ids beyond this vocabulary
// (a prompt from another model) are skipped rather than written out of bounds.
void Sampler::apply_penalties(float* z, int64_t n_vocab) const {
  const float rp = params_.repetition_penalty;
  auto repeat = [&](int32_t t) { z[t] = z[t] > 0.0f ? z[t] / rp : z[t] * rp; };
  if (rp != 1.0f) {
    for (int32_t t : prompt_tokens_) {
      if (t < n_vocab) repeat(t);
    }
    for (const auto& [t, count] : output_counts_) {
      // Prompt tokens were already penalised once; the penalty is per token, not per sighting.
      if (t < n_vocab && !std::binary_search(prompt_tokens_.begin(), prompt_tokens_.end(), t)) repeat(t);
    }
  }
  const float fp = params_.frequency_penalty, pp = params_.presence_penalty;
  if (fp != 0.0f || pp != 0.0f) {
    for (const auto& [t, count] : output_counts_) {
      if (t < n_vocab) z[t] -= fp * float(count) + pp;
    }
  }
}

void Sampler::replay(int32_t token) {
  if (params_.temperature >= kGreedyBelow) (void)uniform();
  accept(token);
}

double Sampler::uniform() { return double(rng_() >> 11) * 0x1.0p-53; }

void Sampler::fill_logprobs(const float* logits, int64_t n_vocab, int32_t token, SampleResult* out) {
  out->top.clear();
  if (!params_.logprobs) return;
  TokenOutput t = token_logprobs(logits, n_vocab, token, params_.top_logprobs);
  out->logprob = t.logprob;
  out->top = std::move(t.top);
}

TokenOutput token_logprobs(const float* logits, int64_t n_vocab, int32_t token, int32_t top_n) {
  TokenOutput out;
  out.token = token;
  const float m = logits[argmax(logits, n_vocab)];
  double s = 0.0;
  for (int64_t i = 0; i < n_vocab; ++i) s += std::exp(double(logits[i]) - m);
  const double lse = double(m) + std::log(s);
  out.logprob = float(double(logits[token]) - lse);
  const auto k = size_t(std::clamp<int64_t>(top_n, 0, n_vocab));
  if (k == 0) return out;
  // A heap of the k best seen so far, worst on top: one pass, no sort of the vocabulary.
  auto better = [](const TokenLogprob& a, const TokenLogprob& b) {
    return a.logprob > b.logprob || (a.logprob == b.logprob && a.token < b.token);
  };
  out.top.reserve(k);
  for (int64_t i = 0; i < n_vocab; ++i) {
    const TokenLogprob c{int32_t(i), logits[i]};
    if (out.top.size() < k) {
      out.top.push_back(c);
      std::push_heap(out.top.begin(), out.top.end(), better);
    } else if (better(c, out.top.front())) {
      std::pop_heap(out.top.begin(), out.top.end(), better);
      out.top.back() = c;
      std::push_heap(out.top.begin(), out.top.end(), better);
    }
  }
  std::sort_heap(out.top.begin(), out.top.end(), better);
  for (TokenLogprob& t : out.top) t.logprob = float(double(t.logprob) - lse);
  return out;
}

// The penalised, biased logits of a row; with temperature, scaled by it, and the candidates
// that survive top_k, top_p and min_p in idx_[0, n_cand_) with m_ their largest logit.
bool Sampler::prepare(const float* logits, int64_t n_vocab) {
  if (n_vocab <= 0) fail("Sampler::sample: n_vocab must be positive, got {}", n_vocab);
  const bool penalised = has_penalties();
  const bool biased = !params_.logit_bias.empty();
  const bool greedy = params_.temperature < kGreedyBelow;
  if (greedy && !penalised && !biased) {
    greedy_token_ = argmax(logits, n_vocab);
    return false;
  }
  z_.assign(logits, logits + n_vocab);  // reuses capacity after the first call
  float* z = z_.data();
  if (penalised) apply_penalties(z, n_vocab);
  for (const auto& [t, bias] : params_.logit_bias) {
    if (t >= n_vocab) fail("Sampler::sample: logit_bias token {} is outside the vocabulary [0, {})", t, n_vocab);
    z[t] += bias;
  }
  if (greedy) {
    greedy_token_ = argmax(z, n_vocab);
    return false;
  }
  const float inv_t = 1.0f / params_.temperature;
  for (int64_t i = 0; i < n_vocab; ++i) z[i] *= inv_t;
  const float m = z[argmax(z, n_vocab)];
  if (!std::isfinite(m)) fail("Sampler::sample: the largest logit is {}, nothing to draw from", m);

  idx_.resize(size_t(n_vocab));
  std::iota(idx_.begin(), idx_.end(), 0);
  int32_t* idx = idx_.data();
  int64_t n = n_vocab;
  const Higher higher{z};

  // top_k: the k largest, unordered; nth_element is linear where a sort is not.
  if (params_.top_k > 0 && params_.top_k < n) {
    std::nth_element(idx, idx + params_.top_k, idx + n, higher);
    n = params_.top_k;
  }

  // top_p: keep tokens, most likely first, while the mass strictly above them is < p,
  // i.e. the smallest set whose mass reaches p (vLLM's rule). The nucleus is usually a
  // handful of tokens, so order the candidates in growing chunks instead of sorting all.
  if (params_.top_p < 1.0f) {
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) total += std::exp(double(z[idx[i]]) - m);
    const double target = double(params_.top_p) * total;
    double above = 0.0;
    int64_t sorted = 0, keep = n;
    while (sorted < n && keep == n) {
      const int64_t end = std::min(n, std::max<int64_t>(64, sorted * 4));
      if (end < n) std::nth_element(idx + sorted, idx + end, idx + n, higher);
      std::sort(idx + sorted, idx + end, higher);
      for (int64_t i = sorted; i < end; ++i) {
        if (above >= target) {
          keep = i;
          break;
        }
        above += std::exp(double(z[idx[i]]) - m);
      }
      sorted = end;
    }
    n = keep;
  }

  // min_p: drop tokens below min_p times the largest probability. The ratio to the max is
  // exp(z - m) whatever the normalisation, and the max survives top_k and top_p, so this
  // is a plain threshold on the survivors.
  if (params_.min_p > 0.0f) {
    const float floor = m + std::log(params_.min_p);
    int64_t kept = 0;  // in place, order kept; std::stable_partition may allocate
    for (int64_t i = 0; i < n; ++i) {
      if (z[idx[i]] >= floor) idx[kept++] = idx[i];
    }
    n = kept;
  }
  n_cand_ = n;
  m_ = m;
  return true;
}

double Sampler::weight(int64_t i) const { return std::exp(double(z_[size_t(idx_[size_t(i)])]) - m_); }

int32_t Sampler::draw(int32_t excluded, double total) {
  const float* z = z_.data();
  const int32_t* idx = idx_.data();
  const int64_t n = n_cand_;
  const double r = uniform() * total;
  double acc = 0.0;
  int32_t token = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (idx[i] == excluded) continue;
    token = idx[i];  // rounding can leave r just past the last partial sum: keep the last one
    acc += std::exp(double(z[idx[i]]) - m_);
    if (r < acc) break;
  }
  return token;
}

int32_t Sampler::sample(const float* logits, int64_t n_vocab, SampleResult* out) {
  const bool drawn = prepare(logits, n_vocab);
  int32_t token = greedy_token_;
  if (drawn) {
    double total = 0.0;
    for (int64_t i = 0; i < n_cand_; ++i) total += weight(i);
    token = draw(-1, total);
  }
  if (out) {
    out->token = token;
    out->logprob = 0.0f;
    fill_logprobs(logits, n_vocab, token, out);
  }
  return token;
}

int32_t Sampler::verify(const float* logits, int64_t n_vocab, int32_t draft, SampleResult* out) {
  const bool drawn = prepare(logits, n_vocab);
  int32_t token = greedy_token_;
  if (drawn) {
    double total = 0.0, w_draft = 0.0;
    for (int64_t i = 0; i < n_cand_; ++i) {
      const double w = weight(i);
      total += w;
      if (idx_[size_t(i)] == draft) w_draft = w;
    }
    // A draft the filters removed has probability 0 and is always rejected. A rejected
    // draft's mass is taken out of the draw, so that accepting with p(draft) and drawing
    // from the rest gives every token exactly its probability p.
    token = uniform() < w_draft / total ? draft : draw(draft, total - w_draft);
  }
  if (out) {
    out->token = token;
    out->logprob = 0.0f;
    fill_logprobs(logits, n_vocab, token, out);
  }
  return token;
}

}  // namespace moe
