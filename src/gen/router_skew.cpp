#include "gen/router_skew.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "core/error.h"
#include "gen/gen_model.h"
#include "gen/gen_random.h"

namespace moe {
namespace {

// gen_model's router rows (uniform, scale 2 sqrt(3 / n_embd)) have norm 2 and a normed
// hidden state has unit rms, so router logits spread with standard deviation 2.
constexpr float kLogitStd = 2.0f;
// The standard deviation of sigmoid(x) for x ~ N(0, 2^2): the spread of V3's scores.
constexpr float kSigmoidScoreStd = 0.314f;
// sqrt(6) / pi: the scale of the Gumbel distribution with unit standard deviation. Top-k
// over scores with Gumbel noise of scale beta, shifted by beta * ln(p), draws experts
// without replacement in proportion to p.
constexpr float kGumbelScalePerStd = 0.7797f;
// The shift of a token's own expert group under --expert-skew-by-token: a random logit of
// another group rarely climbs 3 standard deviations.
constexpr float kGroupShiftLogits = 3.0f * kLogitStd;
// A set routing channel carries four times the energy of the rest of the token embedding
// (whose elements are uniform in [-1, 1): n_embd / 3), so that it keeps most of the normed
// hidden state while the attention and FFN outputs pile up in the residual stream.
constexpr float kChannelEnergy = 4.0f;
// Those outputs still raise the residual's rms with depth and so lower a channel's value in
// the normed hidden state below its value on the embedding alone. Measured over the MoE
// layers of 8-layer tiny models: 0.8 to 1.05 of it (qwen3moe), 0.55 to 0.95 (deepseek2);
// this is about the mean. (The 16-layer mid deepseek2 falls from 0.8 to 0.3.)
constexpr float kResidualShare = 0.85f;

// order[r] is the expert of popularity rank r (0: hottest) in one layer.
std::vector<int64_t> expert_ranking(uint64_t seed, int64_t layer, int64_t n_experts) {
  std::vector<int64_t> order(static_cast<size_t>(n_experts));
  std::iota(order.begin(), order.end(), int64_t(0));
  uint64_t s = seed ^ gen::name_hash("expert_skew.ranking") ^ (uint64_t(layer) * 0xd1b54a32d192ed03ull);
  for (int64_t i = n_experts - 1; i > 0; --i) std::swap(order[size_t(i)], order[gen::splitmix(s) % uint64_t(i + 1)]);
  return order;
}

// Selection-score shift per expert, centred so the scores keep their overall level.
std::vector<float> popularity_shift(uint64_t seed, int64_t layer, int64_t n_experts, float skew, float beta) {
  const std::vector<int64_t> order = expert_ranking(seed, layer, n_experts);
  std::vector<double> shift(static_cast<size_t>(n_experts));
  for (int64_t r = 0; r < n_experts; ++r) shift[size_t(order[size_t(r)])] = -double(skew) * beta * std::log(double(r + 1));
  const double mean = std::accumulate(shift.begin(), shift.end(), 0.0) / double(n_experts);
  std::vector<float> out;
  for (double x : shift) out.push_back(float(x - mean));
  return out;
}

}  // namespace

void check_router_skew(const GenSpec& g) {
  if (!(g.expert_skew >= 0.0f && std::isfinite(g.expert_skew))) {
    fail("gen-model: --expert-skew {} must be a number >= 0", g.expert_skew);
  }
  if (g.skew_token_groups != 0 && (g.skew_token_groups < 2 || g.skew_token_groups > g.n_experts)) {
    fail("gen-model: --expert-skew-by-token {} must be at least 2 and at most the expert count ({})",
         g.skew_token_groups, g.n_experts);
  }
  if (g.skew_token_groups > 0 && g.skew_token_groups + 1 > g.n_embd / 4) {
    fail("gen-model: --expert-skew-by-token {} needs a residual coordinate per range, too many for the hidden "
         "size {}", g.skew_token_groups, g.n_embd);
  }
}

RouterSkew::RouterSkew(const GenSpec& g)
    : skew_(g.expert_skew),
      groups_(g.skew_token_groups),
      n_embd_(g.n_embd),
      n_vocab_(g.n_vocab),
      n_experts_(g.n_experts),
      via_bias_(g.arch == Arch::Deepseek2 && g.v3_gating),
      shared_channel_(skew_ > 0.0f && !via_bias_) {
  if (!active()) return;
  // A token sets the popularity channel, if any, and its range's channel, if any.
  const float set_per_token = float((shared_channel_ ? 1 : 0) + (groups_ > 0 ? 1 : 0));
  const float token_energy = float(n_embd_) / 3.0f;
  channel_value_ = std::sqrt(kChannelEnergy * token_energy);
  const float rms = std::sqrt(token_energy * (1.0f + set_per_token * kChannelEnergy) / float(n_embd_));
  kappa_ = kResidualShare * channel_value_ / rms;
  if (skew_ > 0.0f) {
    // The channels take their share of the normed hidden state from the token's own part,
    // and with it of the router logits' spread.
    const float logit_std = kLogitStd / std::sqrt(1.0f + set_per_token * kChannelEnergy);
    const float beta = kGumbelScalePerStd * (via_bias_ ? kSigmoidScoreStd : logit_std);
    for (int64_t l = 0; l < g.n_layer; ++l) shift_.push_back(popularity_shift(g.seed, l, n_experts_, skew_, beta));
  }
}

void RouterSkew::edit_embedding_row(int64_t token, float* row) const {
  std::fill(row + first_channel(), row + n_embd_, 0.0f);
  if (shared_channel_) row[first_channel()] = channel_value_;
  if (groups_ > 0) row[group_channel(range_of(token))] = channel_value_;
}

void RouterSkew::edit_router_row(int64_t layer, int64_t expert, float* row) const {
  std::fill(row + first_channel(), row + n_embd_, 0.0f);
  if (shared_channel_) row[first_channel()] = shift_[size_t(layer)][size_t(expert)] / kappa_;
  if (groups_ > 0) row[group_channel(group_of(expert))] = kGroupShiftLogits / kappa_;
}

void RouterSkew::edit_bias(int64_t layer, float* bias) const {
  if (!via_bias_ || skew_ == 0.0f) return;
  for (int64_t e = 0; e < n_experts_; ++e) bias[e] += shift_[size_t(layer)][size_t(e)];
}

void RouterSkew::edit_reader_row(float* row) const { std::fill(row + first_channel(), row + n_embd_, 0.0f); }

void RouterSkew::edit_norm_row(float* row) const { std::fill(row + first_channel(), row + n_embd_, 1.0f); }

void RouterSkew::edit_writer_row(int64_t coord, float* row, int64_t n) const {
  if (coord >= first_channel()) std::fill(row, row + n, 0.0f);
}

}  // namespace moe
