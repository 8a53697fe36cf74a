#include "moe/expert_load.h"

#include <algorithm>

#include "core/error.h"

namespace moe {

ExpertLoadRecorder::ExpertLoadRecorder(int64_t layers, int64_t experts, int32_t ranks, int64_t capacity)
    : layers_(layers),
      experts_(experts),
      ranks_(ranks),
      capacity_(capacity),
      routed_(size_t(kSyncSteps * layers * experts), 0),
      computed_(size_t(kSyncSteps), 0),
      load_(size_t(capacity * layers * experts), 0.0f),
      rank_computed_(size_t(capacity * ranks), 0) {
  if (capacity < 1) fail("the expert-load window must hold at least one step");
}

void ExpertLoadRecorder::add_routed(int64_t layer, const int32_t* experts, int64_t n) {
  int64_t* row = routed_.data() + (pending_ * layers_ + layer) * experts_;
  for (int64_t i = 0; i < n; ++i) ++row[experts[i]];
}

void ExpertLoadRecorder::add_computed(int64_t pairs) {
  computed_[size_t(pending_)] += pairs;
  computed_total_ += uint64_t(pairs);
}

void ExpertLoadRecorder::end_step() { ++pending_; }

void ExpertLoadRecorder::sync(EpComm& comm) {
  if (pending_ == 0) return;
  const int64_t n = pending_;
  std::vector<int64_t> routed(routed_.begin(), routed_.begin() + n * layers_ * experts_);
  comm.sum_each(routed, "expert-load sync");
  std::vector<int64_t> computed(size_t(n * ranks_), 0);
  for (int64_t t = 0; t < n; ++t) computed[size_t(t * ranks_ + comm.rank())] = computed_[size_t(t)];
  comm.sum_each(computed, "expert-load sync");
  std::fill(routed_.begin(), routed_.end(), 0);
  std::fill(computed_.begin(), computed_.end(), 0);
  pending_ = 0;

  std::lock_guard lock(mu_);
  synced_ += n;
  const int64_t row = layers_ * experts_;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t slot = (head_ + filled_) % capacity_;
    std::copy_n(routed.begin() + t * row, row, load_.begin() + slot * row);
    std::copy_n(computed.begin() + t * ranks_, ranks_, rank_computed_.begin() + slot * ranks_);
    if (filled_ < capacity_) {
      ++filled_;
    } else {
      head_ = (head_ + 1) % capacity_;
    }
  }
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

int64_t ExpertLoadRecorder::synced_steps() const {
  std::lock_guard lock(mu_);
  return synced_;
}

uint64_t ExpertLoadRecorder::computed_total() const { return computed_total_; }

double ExpertLoadRecorder::imbalance() const {
  std::lock_guard lock(mu_);
  std::vector<int64_t> per_rank(size_t(ranks_), 0);
  for (int64_t i = 0; i < filled_; ++i) {
    for (int32_t r = 0; r < ranks_; ++r) per_rank[size_t(r)] += rank_computed_[size_t(((head_ + i) % capacity_) * ranks_ + r)];
  }
  int64_t total = 0, most = 0;
  for (const int64_t v : per_rank) {
    total += v;
    most = std::max(most, v);
  }
  return total == 0 ? 0.0 : double(most) * double(ranks_) / double(total);
}

}  // namespace moe
