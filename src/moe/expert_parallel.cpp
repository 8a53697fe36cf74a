#include "moe/expert_parallel.h"

#include <fmt/format.h>

#include <cstring>

#include "core/error.h"
#include "core/huge_pages.h"
#include "kernels/regrouped.h"

namespace moe {

namespace {

double unix_now_s() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

}  // namespace

ExpertParallel::ExpertParallel(EpComm& comm, ExpertMap map, int64_t load_window, ReplacementOptions replacement)
    : comm_(comm),
      map_(std::move(map)),
      load_(map_.layers(), map_.experts(), comm.size(), load_window),
      replacement_(replacement),
      view_(map_.placement()) {
  if (map_.ranks() != comm_.size()) {
    fail("the expert map is for {} ranks but the group has {}", map_.ranks(), comm_.size());
  }
}

bool ExpertParallel::join_step(StepWork work) {
  // Every rank ran the same steps, so the load's pending steps and the decisions below are
  // the same on every rank: the syncs, plans and switches happen at the same step on all.
  const auto now = LiveReplacement::Clock::now();
  if (step_open_) {
    load_.end_step();
    ++steps_;
    constexpr size_t kMaxRecords = size_t(1) << 20;
    if (step_records_.size() < kMaxRecords) {
      step_records_.push_back(
          {std::chrono::duration<double, std::milli>(now - step_started_).count(), copying_, prefilling_});
    }
  }
  if (load_.sync_due()) load_.sync(comm_);
  const bool copied = replacement_.advance(comm_);
  // Only load recorded since the last plan can change the plan.
  const bool plan = comm_.rank() == 0 && replacement_.due(now) &&
                    load_.synced_steps() > planned_at_;
  // Summed over the ranks: ranks with tokens, ranks leaving, plans asked for (rank 0's),
  // ranks whose copies for the plan in progress are done, ranks prefilling.
  std::vector<int64_t> v = {work != StepWork::none ? 1 : 0, leaving_ ? 1 : 0, plan ? 1 : 0, copied ? 1 : 0,
                            work == StepWork::prefill ? 1 : 0};
  comm_.sum_each(v, "start of a step");
  everyone_left_ = v[1] == comm_.size();
  step_open_ = v[0] > 0;
  if (!step_open_ && load_.has_pending()) load_.sync(comm_);
  if (v[3] == comm_.size()) {
    switch_placement();
  } else if (v[2] > 0) {
    planned_at_ = load_.synced_steps();
    const auto t0 = LiveReplacement::Clock::now();
    const placement::Trace window = load_.window();
    const LiveReplacement::Plan p =
        replacement_.start(window, map_, comm_.rank(), [this](int64_t l, int32_t e) { return replica_source(l, e); });
    const double ms = std::chrono::duration<double, std::milli>(LiveReplacement::Clock::now() - t0).count();
    if (p.moves > 0) view_.planned({unix_now_s(), steps_, ms, p.moves, p.bytes, p.balance_before, p.balance_after});
    if (log_ && p.moves > 0) {
      log_(fmt::format("ep: re-placement planned at step {} in {:.1f} ms: {} expert copies, balance {:.3f} -> {:.3f} on the last {} steps",
                       steps_, ms, p.moves, p.balance_before, p.balance_after, window.steps));
    }
  }
  step_started_ = LiveReplacement::Clock::now();
  copying_ = replacement_.in_progress();
  prefilling_ = v[4] > 0;
  return step_open_;
}

EpRunSummary ExpertParallel::run_summary() {
  // Each copy was counted by its sender and its receiver.
  const int64_t moved = comm_.sum_over_ranks(int64_t(bytes_moved()), "run summary") / 2;
  return summarize_run(step_records_, switch_steps_, load_.rank_pairs(), load_.layers(), load_.ranks(), uint64_t(moved));
}

void ExpertParallel::switch_placement() {
  map_ = replacement_.take_map();
  for (LiveReplacement::Arrived& a : replacement_.take_arrived()) owned_[{a.layer, a.expert}] = std::move(a.weights);
  std::erase_if(owned_, [&](const auto& kv) { return !map_.holds(kv.first.first, comm_.rank(), kv.first.second); });
  ++replacements_;
  switch_steps_.push_back(steps_);
  view_.switched(map_.placement(), unix_now_s(), steps_);
  if (log_) log_(fmt::format("ep: re-placement switched in at step {} ({} so far)", steps_, replacements_));
}

uint64_t ExpertParallel::read_in_own_experts() {
  uint64_t bytes = 0;
  volatile uint8_t sink = 0;
  regrouped_ = regroup_here();
  // A replica is sent in its holder's layout: every rank must use the same one.
  const int64_t regrouping = comm_.sum_over_ranks(regrouped_ ? 1 : 0, "the weight layout");
  if (regrouping != 0 && regrouping != comm_.size()) {
    fail("expert parallelism: {} of {} ranks regroup weights for the AVX-512 kernels and the others do not; "
         "give every rank the same CPU features, or MOENGINE_REGROUP=0 to all",
         regrouping, comm_.size());
  }
  // The rank's experts move into one huge-page allocation, as the loader moves the rest of
  // the model (regrouped on the way where the AVX-512 path runs).
  const bool move = weights_move_here();
  size_t arena_bytes = 0;
  for (int64_t l = 0; move && l < map_.layers(); ++l) {
    for (const int32_t e : map_.experts_on(l, comm_.rank())) arena_bytes += expert_bytes_like(weights(l, e));
  }
  const std::shared_ptr<uint8_t> arena = move && arena_bytes > 0 ? allocate_huge_pages(arena_bytes, "this rank's experts") : nullptr;
  size_t at = 0;
  for (int64_t l = 0; l < map_.layers(); ++l) {
    for (const int32_t e : map_.experts_on(l, comm_.rank())) {
      const FfnWeights w = weights(l, e);
      if (move) {
        OwnedExpert o = place_expert_like(w, std::shared_ptr<uint8_t>(arena, arena.get() + at));
        at += expert_bytes_like(w);
        for (auto [from, to] : {std::pair{&w.gate, &o.w.gate}, {&w.up, &o.w.up}, {&w.down, &o.w.down}}) {
          *to = copy_weights(*from, static_cast<uint8_t*>(const_cast<void*>(to->data)), held_regrouped(*from));
          release_weight_pages(*from);
          bytes += size_t(from->rows) * from->row_stride;
        }
        owned_[{l, e}] = std::move(o);
        continue;
      }
      for (const QMatrix* m : {&w.gate, &w.up, &w.down}) {
        const size_t n = size_t(m->rows) * m->row_stride;
        const uint8_t* p = static_cast<const uint8_t*>(m->data);
        for (size_t off = 0; off < n; off += 4096) sink = sink + p[off];
        if (n > 0) sink = sink + p[n - 1];
        bytes += n;
      }
    }
  }
  return bytes;
}

FfnWeights ExpertParallel::weights(int64_t layer, int32_t expert) const {
  const auto it = owned_.find({layer, expert});
  if (it != owned_.end()) return it->second.w;
  if (!source_) fail("expert parallelism: no weights for the routed experts");
  return source_(layer, expert);
}

FfnWeights ExpertParallel::replica_source(int64_t layer, int32_t expert) const {
  FfnWeights w = weights(layer, expert);
  if (!owned_.contains({layer, expert})) {
    for (QMatrix* m : {&w.gate, &w.up, &w.down}) {
      if (held_regrouped(*m)) m->type = regrouped_type(m->type);
    }
  }
  return w;
}

bool ExpertParallel::held_regrouped(const QMatrix& file) const { return regrouped_ && can_regroup(file); }

void ExpertParallel::run_layer(const MoeLayerInput& in, FfnRunner& runner, float* out, ThreadPool& pool) {
  const int32_t ranks = comm_.size(), me = comm_.rank();
  const int64_t n = in.n_tokens, k = in.k, n_embd = in.n_embd;
  // A dispatched row: the expert's id, then the token's input.
  const int64_t row_bytes = int64_t(sizeof(int32_t) + sizeof(float) * size_t(n_embd));

  load_.add_routed(in.moe_layer, in.ids, n * k);
  dest_.resize(size_t(n * k));
  back_row_.assign(size_t(n * k), -1);
  std::vector<int64_t> send_rows(static_cast<size_t>(ranks), 0);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < k; ++i) {
      const int32_t r = map_.rank_for(in.moe_layer, in.ids[t * k + i], me, t);
      dest_[size_t(t * k + i)] = r;
      if (r != me) ++send_rows[size_t(r)];
    }
  }
  const std::vector<int64_t> recv_rows = comm_.exchange_counts(send_rows, "dispatch counts");

  std::vector<int64_t> cursor(static_cast<size_t>(ranks), 0);
  int64_t n_send = 0, n_recv = 0;
  for (int32_t r = 0; r < ranks; ++r) {
    cursor[size_t(r)] = n_send;
    n_send += send_rows[size_t(r)];
    n_recv += recv_rows[size_t(r)];
  }
  send_.resize(size_t(n_send * row_bytes));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < k; ++i) {
      const int32_t r = dest_[size_t(t * k + i)];
      if (r == me) continue;
      const int64_t row = cursor[size_t(r)]++;
      back_row_[size_t(t * k + i)] = row;
      uint8_t* p = send_.data() + row * row_bytes;
      std::memcpy(p, &in.ids[t * k + i], sizeof(int32_t));
      std::memcpy(p + sizeof(int32_t), in.h + t * n_embd, sizeof(float) * size_t(n_embd));
    }
  }
  std::vector<int64_t> send_bytes(static_cast<size_t>(ranks)), recv_bytes(static_cast<size_t>(ranks));
  for (int32_t r = 0; r < ranks; ++r) {
    send_bytes[size_t(r)] = send_rows[size_t(r)] * row_bytes;
    recv_bytes[size_t(r)] = recv_rows[size_t(r)] * row_bytes;
  }
  recv_.resize(size_t(n_recv * row_bytes));
  comm_.all_to_all(send_.data(), send_bytes, recv_.data(), recv_bytes, "dispatch");

  // This rank's tokens, then the rows other ranks sent.
  inputs_.resize(size_t((n + n_recv) * n_embd));
  if (n > 0) std::memcpy(inputs_.data(), in.h, sizeof(float) * size_t(n * n_embd));
  back_recv_.resize(size_t(n_send * n_embd));
  runner.reset(n, n_embd, n_recv);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < k; ++i) {
      const int32_t e = in.ids[t * k + i];
      const float w = in.weights[t * k + i];
      const int64_t back = back_row_[size_t(t * k + i)];
      if (back < 0) {
        runner.add(weights(in.moe_layer, e), int32_t(t), w);
      } else {
        runner.add_external(int32_t(t), w, back_recv_.data() + back * n_embd);
      }
    }
    if (in.shared) runner.add(*in.shared, int32_t(t), 1.0f);
  }
  refs_.resize(size_t(n_recv));
  for (int64_t j = 0; j < n_recv; ++j) {
    const uint8_t* p = recv_.data() + j * row_bytes;
    int32_t e = 0;
    std::memcpy(&e, p, sizeof(int32_t));
    if (e < 0 || e >= map_.experts() || !map_.holds(in.moe_layer, me, e)) {
      fail("expert-parallel rank {}: MoE layer {} was sent a token for expert {}, which this rank does not hold", me,
           in.moe_layer, e);
    }
    std::memcpy(inputs_.data() + (n + j) * n_embd, p + sizeof(int32_t), sizeof(float) * size_t(n_embd));
    refs_[size_t(j)] = runner.compute_only(weights(in.moe_layer, e), int32_t(n + j));
  }
  runner.compute(inputs_.data(), n_embd, pool);
  load_.add_computed(in.moe_layer, n * k - n_send + n_recv);

  back_send_.resize(size_t(n_recv * n_embd));
  for (int64_t j = 0; j < n_recv; ++j) {
    std::memcpy(back_send_.data() + j * n_embd, runner.result(refs_[size_t(j)]), sizeof(float) * size_t(n_embd));
  }
  const int64_t out_row = int64_t(sizeof(float)) * n_embd;
  for (int32_t r = 0; r < ranks; ++r) {
    send_bytes[size_t(r)] = recv_rows[size_t(r)] * out_row;
    recv_bytes[size_t(r)] = send_rows[size_t(r)] * out_row;
  }
  comm_.all_to_all(reinterpret_cast<const uint8_t*>(back_send_.data()), send_bytes,
                   reinterpret_cast<uint8_t*>(back_recv_.data()), recv_bytes, "combine");
  runner.combine(out, n_embd, pool);
}

}  // namespace moe
