#include "moe/expert_load.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace moe {

ExpertLoadRecorder::ExpertLoadRecorder(int64_t layers, int64_t experts, int32_t ranks, int64_t capacity)
    : layers_(layers),
      experts_(experts),
      ranks_(ranks),
      capacity_(capacity),
      routed_(size_t(kSyncSteps * layers * experts), 0),
      computed_(size_t(kSyncSteps * layers), 0),
      load_(size_t(capacity * layers * experts), 0.0f),
      rank_computed_(size_t(capacity * layers * ranks), 0),
      window_pairs_(size_t(layers * ranks), 0),
      window_load_(size_t(layers * experts), 0) {
  if (capacity < 1) fail("the expert-load window must hold at least one step");
}

void ExpertLoadRecorder::add_routed(int64_t layer, const int32_t* experts, int64_t n) {
  int64_t* row = routed_.data() + (pending_ * layers_ + layer) * experts_;
  for (int64_t i = 0; i < n; ++i) ++row[experts[i]];
}

void ExpertLoadRecorder::add_computed(int64_t layer, int64_t pairs) {
  computed_[size_t(pending_ * layers_ + layer)] += pairs;
  computed_total_ += uint64_t(pairs);
}

void ExpertLoadRecorder::end_step() { ++pending_; }

void ExpertLoadRecorder::sync(EpComm& comm, WallClock::time_point now) {
  if (pending_ == 0) return;
  const int64_t n = pending_;
  std::vector<int64_t> routed(routed_.begin(), routed_.begin() + n * layers_ * experts_);
  comm.sum_each(routed, "expert-load sync");
  const int64_t per_step = layers_ * ranks_;
  std::vector<int64_t> computed(size_t(n * per_step), 0);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t l = 0; l < layers_; ++l) computed[size_t(t * per_step + l * ranks_ + comm.rank())] = computed_[size_t(t * layers_ + l)];
  }
  comm.sum_each(computed, "expert-load sync");
  std::fill(routed_.begin(), routed_.end(), 0);
  std::fill(computed_.begin(), computed_.end(), 0);
  pending_ = 0;

  std::lock_guard lock(mu_);
  synced_ += n;
  const int64_t row = layers_ * experts_;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t slot = (head_ + filled_) % capacity_;
    for (int64_t j = 0; j < row; ++j) {
      window_load_[size_t(j)] += routed[size_t(t * row + j)] - int64_t(load_[size_t(slot * row + j)]);
    }
    std::copy_n(routed.begin() + t * row, row, load_.begin() + slot * row);
    // The step a full window drops (an empty slot holds zeros) leaves the window's sums.
    for (int64_t j = 0; j < per_step; ++j) {
      window_pairs_[size_t(j)] += computed[size_t(t * per_step + j)] - rank_computed_[size_t(slot * per_step + j)];
    }
    std::copy_n(computed.begin() + t * per_step, per_step, rank_computed_.begin() + slot * per_step);
    if (filled_ < capacity_) {
      ++filled_;
    } else {
      head_ = (head_ + 1) % capacity_;
    }
  }
  imbalance_ = layer_imbalance(window_pairs_, layers_, ranks_);

  const double unix_s = std::chrono::duration<double>(now.time_since_epoch()).count();
  const double start = std::floor(unix_s / kPeriodSeconds) * kPeriodSeconds;
  if (periods_.empty() || periods_.back().start_unix_s != start) {
    periods_.push_back({start, 0, std::vector<int64_t>(size_t(per_step), 0)});
    if (periods_.size() > kPeriods) periods_.pop_front();
  }
  LoadPeriod& p = periods_.back();
  p.steps += n;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < per_step; ++j) p.rank_pairs[size_t(j)] += computed[size_t(t * per_step + j)];
  }
}

std::vector<LoadPeriod> ExpertLoadRecorder::periods() const {
  std::lock_guard lock(mu_);
  return {periods_.begin(), periods_.end()};
}

placement::Trace ExpertLoadRecorder::window() const {
  std::lock_guard lock(mu_);
  placement::Trace t;
  t.steps = filled_;
  t.layers = layers_;
  t.experts = experts_;
  const int64_t row = layers_ * experts_;
  t.load.resize(size_t(filled_ * row));
  for (int64_t i = 0; i < filled_; ++i) {
    std::copy_n(load_.begin() + ((head_ + i) % capacity_) * row, row, t.load.begin() + i * row);
  }
  return t;
}

std::vector<int64_t> ExpertLoadRecorder::window_load(int64_t* steps) const {
  std::lock_guard lock(mu_);
  if (steps) *steps = filled_;
  return window_load_;
}

std::vector<int64_t> ExpertLoadRecorder::window_rank_pairs() const {
  std::lock_guard lock(mu_);
  return window_pairs_;
}

std::vector<std::vector<int64_t>> ExpertLoadRecorder::rank_pairs() const {
  std::lock_guard lock(mu_);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(filled_));
  for (int64_t i = 0; i < filled_; ++i) {
    const auto row = rank_computed_.begin() + ((head_ + i) % capacity_) * layers_ * ranks_;
    out[size_t(i)].assign(row, row + layers_ * ranks_);
  }
  return out;
}

int64_t ExpertLoadRecorder::synced_steps() const {
  std::lock_guard lock(mu_);
  return synced_;
}

uint64_t ExpertLoadRecorder::computed_total() const { return computed_total_; }

double ExpertLoadRecorder::imbalance() const {
  std::lock_guard lock(mu_);
  return imbalance_;
}

double layer_imbalance(const std::vector<int64_t>& pairs, int64_t layers, int32_t ranks) {
  double peaks = 0, means = 0;
  for (int64_t l = 0; l < layers; ++l) {
    int64_t total = 0, most = 0;
    for (int32_t r = 0; r < ranks; ++r) {
      total += pairs[size_t(l * ranks + r)];
      most = std::max(most, pairs[size_t(l * ranks + r)]);
    }
    peaks += double(most);
    means += double(total) / double(ranks);
  }
  return means == 0 ? 0.0 : peaks / means;
}

std::vector<double> per_layer_imbalance(const std::vector<int64_t>& pairs, int64_t layers, int32_t ranks) {
  std::vector<double> out(size_t(layers), 0.0);
  for (int64_t l = 0; l < layers; ++l) {
    const auto row = pairs.begin() + l * ranks;
    const int64_t total = std::accumulate(row, row + ranks, int64_t(0));
    if (total > 0) out[size_t(l)] = double(*std::max_element(row, row + ranks)) * double(ranks) / double(total);
  }
  return out;
}

}  // namespace moe
