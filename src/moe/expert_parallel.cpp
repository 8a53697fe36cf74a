#include "moe/expert_parallel.h"

#include <cstring>

#include "core/error.h"

namespace moe {

ExpertParallel::ExpertParallel(EpComm& comm, ExpertMap map, int64_t load_window)
    : comm_(comm), map_(std::move(map)), load_(map_.layers(), map_.experts(), comm.size(), load_window) {
  if (map_.ranks() != comm_.size()) {
    fail("the expert map is for {} ranks but the group has {}", map_.ranks(), comm_.size());
  }
}

bool ExpertParallel::join_step(bool have_tokens) {
  // Every rank ran the same steps, so the load's pending steps and the decisions below are
  // the same on every rank: the syncs are collectives they all reach together.
  if (step_open_) load_.end_step();
  if (load_.sync_due()) load_.sync(comm_);
  // Each rank adds 1 when it has tokens and kLeaving when it is leaving.
  constexpr int64_t kLeaving = int64_t(1) << 32;
  const int64_t sum = comm_.sum_over_ranks((have_tokens ? 1 : 0) + (leaving_ ? kLeaving : 0), "start of a step");
  everyone_left_ = sum / kLeaving == comm_.size();
  step_open_ = sum % kLeaving > 0;
  if (!step_open_ && load_.has_pending()) load_.sync(comm_);
  return step_open_;
}

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
        runner.add(in.expert(e), int32_t(t), w);
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
    refs_[size_t(j)] = runner.compute_only(in.expert(e), int32_t(n + j));
  }
  runner.compute(inputs_.data(), n_embd, pool);
  load_.add_computed(n * k - n_send + n_recv);

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
