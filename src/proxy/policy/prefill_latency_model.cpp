#include "proxy/policy/prefill_latency_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <utility>
#include <vector>

namespace moe::routing {
namespace {

using Vec3 = std::array<double, 3>;
using Mat3 = std::array<Vec3, 3>;

// Features in units that keep the normal equations well conditioned: requests,
// thousands of tokens, millions of attention pairs.
constexpr double kTokenUnit = 1e3, kPairUnit = 1e6;
// Below any real prefill; keeps relative errors finite.
constexpr double kMinSeconds = 1e-6;
// How fast the typical error follows new observations.
constexpr double kErrorSmoothing = 0.1;
// Weights relative to the curve need the curve: each pass refits against the last one,
// starting from the previous fit, which is close after one more observation.
constexpr int kReweightingPasses = 3;
// Where the prior pins its curve: a short, a medium and a long prompt.
constexpr int64_t kPriorPoints[] = {256, 2048, 16384};

Vec3 features(int64_t new_tokens, int64_t cached_tokens) {
  return {1.0, double(new_tokens) / kTokenUnit, attention_pairs(new_tokens, cached_tokens) / kPairUnit};
}

// Solves the leading k x k system m * x = v in place (Gaussian elimination, partial
// pivoting); false when it is singular.
bool solve(Mat3& m, Vec3& v, size_t k) {
  for (size_t c = 0; c < k; ++c) {
    size_t pivot = c;
    for (size_t r = c + 1; r < k; ++r)
      if (std::abs(m[r][c]) > std::abs(m[pivot][c])) pivot = r;
    if (std::abs(m[pivot][c]) < 1e-300) return false;
    std::swap(m[c], m[pivot]);
    std::swap(v[c], v[pivot]);
    for (size_t r = c + 1; r < k; ++r) {
      const double f = m[r][c] / m[c][c];
      for (size_t j = c; j < k; ++j) m[r][j] -= f * m[c][j];
      v[r] -= f * v[c];
    }
  }
  for (size_t c = k; c-- > 0;) {
    for (size_t j = c + 1; j < k; ++j) v[c] -= m[c][j] * v[j];
    v[c] /= m[c][c];
  }
  return true;
}

// argmin over theta >= 0 of theta^T a theta - 2 b^T theta, for positive definite a. The
// constrained optimum is the unconstrained optimum over its own support, so with three
// coefficients it is enough to try every support: among the feasible ones the best has
// objective -b_S^T theta_S.
Vec3 nonnegative_least_squares(const Mat3& a, const Vec3& b) {
  Vec3 best{};
  double best_objective = 0;  // the empty support
  for (unsigned support = 1; support < 8; ++support) {
    std::array<size_t, 3> idx{};
    size_t k = 0;
    for (size_t i = 0; i < 3; ++i)
      if (support & (1u << i)) idx[k++] = i;
    Mat3 m{};
    Vec3 v{};
    for (size_t r = 0; r < k; ++r) {
      v[r] = b[idx[r]];
      for (size_t c = 0; c < k; ++c) m[r][c] = a[idx[r]][idx[c]];
    }
    if (!solve(m, v, k)) continue;
    if (std::any_of(v.begin(), v.begin() + k, [](double x) { return x < 0; })) continue;
    double objective = 0;
    for (size_t r = 0; r < k; ++r) objective -= b[idx[r]] * v[r];
    if (objective < best_objective) {
      best_objective = objective;
      best = {};
      for (size_t r = 0; r < k; ++r) best[idx[r]] = v[r];
    }
  }
  return best;
}

// Adds one weighted observation to the normal equations.
void add(const Vec3& x, double y, double weight, Mat3& gram, Vec3& moment) {
  for (size_t r = 0; r < 3; ++r) {
    moment[r] += weight * x[r] * y;
    for (size_t c = 0; c < 3; ++c) gram[r][c] += weight * x[r] * x[c];
  }
}

}  // namespace

double attention_pairs(int64_t new_tokens, int64_t cached_tokens) {
  const double n = double(new_tokens);
  return n * double(cached_tokens) + n * (n + 1) / 2;
}

double PrefillTimeFit::seconds(int64_t new_tokens, int64_t cached_tokens) const {
  return fixed_s + per_token_s * double(new_tokens) + per_pair_s * attention_pairs(new_tokens, cached_tokens);
}

double PrefillTimeFit::queue_seconds(int64_t tokens, int64_t requests) const {
  if (tokens <= 0) return 0;
  const int64_t k = std::max<int64_t>(1, requests);
  const double each = double(tokens) / double(k);
  return double(k) * (fixed_s + per_pair_s * each * (each + 1) / 2) + per_token_s * double(tokens);
}

PrefillLatencyModel::PrefillLatencyModel(const PrefillLatencyConfig& config) : config_(config), fit_(config.prior) {
  config_.window = std::max(1, config_.window);
  window_.reserve(size_t(config_.window));
}

void PrefillLatencyModel::observe(int64_t new_tokens, int64_t cached_tokens, double seconds) {
  if (new_tokens <= 0 || cached_tokens < 0 || !std::isfinite(seconds) || seconds <= 0) return;
  const double predicted = std::max(fit_.seconds(new_tokens, cached_tokens), kMinSeconds);
  const double log_error = std::abs(std::log(seconds / predicted));
  const double bound = config_.outlier_threshold * typical_log_error_;
  const double trust = log_error <= bound ? 1.0 : (bound / log_error) * (bound / log_error);
  typical_log_error_ = std::max(
      config_.min_log_error, (1 - kErrorSmoothing) * typical_log_error_ + kErrorSmoothing * std::min(log_error, bound));

  const Observation o{new_tokens, cached_tokens, seconds, trust};
  if (window_.size() < size_t(config_.window)) {
    window_.push_back(o);
  } else {
    window_[next_] = o;
    next_ = (next_ + 1) % window_.size();
  }
  ++observations_;
  refit();
}

void PrefillLatencyModel::refit() {
  // Newest first, each weighing decay^age times its trust.
  std::vector<std::pair<const Observation*, double>> weighted;
  weighted.reserve(window_.size());
  double w = 1, level_weight = 0, level_sum = 0;
  for (size_t k = 0; k < window_.size(); ++k, w *= config_.decay) {
    const Observation& o = window_[(next_ + window_.size() - 1 - k) % window_.size()];
    weighted.emplace_back(&o, w * o.trust);
    const double prior = std::max(config_.prior.seconds(o.new_tokens, o.cached_tokens), kMinSeconds);
    level_weight += w * o.trust;
    level_sum += w * o.trust * std::log(o.seconds / prior);
  }
  const double level = std::exp(level_sum / level_weight);

  PrefillTimeFit fit = fit_;
  for (int pass = 0; pass < kReweightingPasses; ++pass) {
    Mat3 a{};
    Vec3 b{};
    for (const auto& [o, weight] : weighted) {
      const double curve = std::max(fit.seconds(o->new_tokens, o->cached_tokens), kMinSeconds);
      add(features(o->new_tokens, o->cached_tokens), o->seconds, weight / (curve * curve), a, b);
    }
    const double each = config_.prior_weight / double(std::size(kPriorPoints));
    for (int64_t n : kPriorPoints) {
      const double curve = std::max(fit.seconds(n, 0), kMinSeconds);
      add(features(n, 0), level * config_.prior.seconds(n, 0), each / (curve * curve), a, b);
    }
    const Vec3 theta = nonnegative_least_squares(a, b);
    fit = {theta[0], theta[1] / kTokenUnit, theta[2] / kPairUnit, observations_};
  }
  fit_ = fit;
}

}  // namespace moe::routing
