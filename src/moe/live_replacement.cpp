#include "moe/live_replacement.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "core/error.h"
#include "placement/incremental.h"

namespace moe {

namespace {

size_t matrix_bytes(const QMatrix& m) { return size_t(m.rows) * m.row_stride; }
size_t round_up(size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

size_t expert_bytes_like(const FfnWeights& shape) {
  return round_up(matrix_bytes(shape.gate)) + round_up(matrix_bytes(shape.up)) + round_up(matrix_bytes(shape.down));
}

OwnedExpert place_expert_like(const FfnWeights& shape, std::shared_ptr<uint8_t> memory) {
  const size_t gate = round_up(matrix_bytes(shape.gate)), up = round_up(matrix_bytes(shape.up));
  OwnedExpert o;
  o.w = shape;
  o.w.gate.data = memory.get();
  o.w.up.data = memory.get() + gate;
  o.w.down.data = memory.get() + gate + up;
  o.bytes = std::move(memory);
  return o;
}

OwnedExpert allocate_expert_like(const FfnWeights& shape) {
  const size_t total = expert_bytes_like(shape);
  uint8_t* raw = static_cast<uint8_t*>(std::aligned_alloc(64, std::max<size_t>(total, 64)));
  if (!raw) fail("out of memory for an expert replica of {} bytes", total);
  return place_expert_like(shape, std::shared_ptr<uint8_t>(raw, [](uint8_t* p) { std::free(p); }));
}

LiveReplacement::LiveReplacement(ReplacementOptions options) : options_(options), last_plan_(Clock::now()) {
  if (options_.chunk_bytes < 1 || options_.in_flight < 1) fail("re-placement: chunks must be at least 1 byte, 1 in flight");
}

bool LiveReplacement::due(Clock::time_point now) const {
  return options_.interval.count() > 0 && !in_progress() && now - last_plan_ >= options_.interval;
}

LiveReplacement::Plan LiveReplacement::start(const placement::Trace& window, const ExpertMap& current, int32_t me,
                                             const ExpertSource& weights) {
  last_plan_ = Clock::now();
  if (window.steps == 0 || in_progress()) return {};
  const placement::LoadMatrix load = placement::window_load(window, {0, window.steps});
  placement::IncrementalOptions io;
  io.max_moves = options_.max_moves;
  io.target_balance = options_.target_balance;
  const placement::IncrementalResult r = placement::plan_incremental(load, current.placement(), io);
  Plan plan{r.moves, r.balance_before, r.balance_after};
  if (r.moves == 0) return plan;
  next_map_ = std::make_unique<ExpertMap>(
      ExpertMap::from_placement(r.placement, current.layers(), current.experts(), current.ranks(), "the re-placement plan"));

  // Both sides of each copy list the copies in this order, so their chunks match.
  for (int64_t l = 0; l < current.layers(); ++l) {
    for (int32_t to = 0; to < current.ranks(); ++to) {
      for (const int32_t e : next_map_->experts_on(l, to)) {
        if (current.holds(l, to, e)) continue;
        const int32_t from = current.holders(l, e).front();
        const FfnWeights src = weights(l, e);
        for (const QMatrix* m : {&src.gate, &src.up, &src.down}) plan.bytes += matrix_bytes(*m);
        if (to != me && from != me) continue;
        OwnedExpert dst;
        if (to == me) {
          dst = allocate_expert_like(src);
          arrived_.push_back({l, e, dst});
        }
        for (const auto& [s, d] : {std::pair{src.gate, dst.w.gate}, std::pair{src.up, dst.w.up}, std::pair{src.down, dst.w.down}}) {
          const int64_t bytes = int64_t(matrix_bytes(s));
          for (int64_t at = 0; at < bytes; at += options_.chunk_bytes) {
            const int64_t n = std::min(options_.chunk_bytes, bytes - at);
            if (to == me) {
              recvs_.push_back({from, nullptr, static_cast<uint8_t*>(const_cast<void*>(d.data)) + at, n});
            } else {
              sends_.push_back({to, static_cast<const uint8_t*>(s.data) + at, nullptr, n});
            }
          }
        }
      }
    }
  }
  return plan;
}

bool LiveReplacement::advance(EpComm& comm) {
  if (!in_progress()) return false;
  // Sends and receives are capped apart: a rank's receives never wait on its own sends, so
  // two ranks copying to each other cannot block one another.
  while (sending_.size() < options_.in_flight && next_send_ < sends_.size()) {
    const Chunk& c = sends_[next_send_++];
    sending_.push_back(comm.start_send(c.peer, c.from, c.bytes));
    bytes_moved_ += uint64_t(c.bytes);
  }
  while (receiving_.size() < options_.in_flight && next_recv_ < recvs_.size()) {
    const Chunk& c = recvs_[next_recv_++];
    receiving_.push_back(comm.start_recv(c.peer, c.to, c.bytes));
    bytes_moved_ += uint64_t(c.bytes);
  }
  std::erase_if(sending_, [&](EpComm::Transfer t) { return comm.done(t); });
  std::erase_if(receiving_, [&](EpComm::Transfer t) { return comm.done(t); });
  return next_send_ == sends_.size() && next_recv_ == recvs_.size() && sending_.empty() && receiving_.empty();
}

ExpertMap LiveReplacement::take_map() {
  if (!next_map_) fail("re-placement: no plan to switch to");
  ExpertMap m = std::move(*next_map_);
  next_map_.reset();
  sends_.clear();
  recvs_.clear();
  next_send_ = next_recv_ = 0;
  return m;
}

std::vector<LiveReplacement::Arrived> LiveReplacement::take_arrived() { return std::exchange(arrived_, {}); }

}  // namespace moe
