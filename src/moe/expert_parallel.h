#pragma once
// Expert parallelism in one process of the group: attention data-parallel (each rank steps
// its own sequences), routed experts expert-parallel. In every MoE layer each of this
// rank's (token, expert) pairs is computed at the rank the ExpertMap picks: its input row
// is sent there (dispatch), computed with the experts held there, and its output row sent
// back (combine), where it is summed, in top-k order, with the local pairs' rows and the
// shared experts' output. That is the sum one process makes, in the same order, of rows
// computed by the same kernels, so the output is the single process's, bit for bit.
//
// Every rank takes part in every step, in lockstep: a step starts with join_step(), where
// each rank says whether it has tokens; a rank that has none still runs each MoE layer's
// exchanges, with none of its own (Model::step_idle). A rank that stops leaves with the
// others, at a step they all agree on (leave()).
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "moe/ep_comm.h"
#include "moe/ep_step_stats.h"
#include "moe/ep_view.h"
#include "moe/expert_load.h"
#include "moe/expert_map.h"
#include "moe/ffn_jobs.h"
#include "moe/live_replacement.h"

namespace moe {

class ThreadPool;

struct MoeLayerInput {
  int64_t moe_layer = 0;  // index among the model's MoE layers
  const float* h = nullptr;  // [n_tokens, n_embd] normed inputs
  int64_t n_tokens = 0;
  int64_t n_embd = 0;
  const int32_t* ids = nullptr;      // [n_tokens, k] routed experts, best first
  const float* weights = nullptr;    // [n_tokens, k]
  int k = 0;
  const FfnWeights* shared = nullptr;  // shared experts, or null
};

class ExpertParallel {
 public:
  // The expert load of the last `load_window` steps is kept (expert_load.h).
  ExpertParallel(EpComm& comm, ExpertMap map, int64_t load_window = 1024, ReplacementOptions replacement = {});

  // Where the routed experts' weights are (the model file): required before the first step.
  void set_weight_source(ExpertSource source) { source_ = std::move(source); }
  // Reads the weights of the experts this rank holds into memory, so the first steps do not
  // wait on the disk; the others' pages are never touched here. Where the loader moves the
  // weights into huge pages (weights_move_here), the rank's experts are copied into one such
  // allocation, regrouped where the loader regroups (regroup_here), as a single process
  // would hold them: replicas sent between ranks are then regrouped too, and
  // a token's result does not depend on the rank that computed it. Returns the bytes read.
  uint64_t read_in_own_experts();
  // Where to report re-placements (rank 0's are enough); none by default.
  void set_log(std::function<void(const std::string&)> log) { log_ = std::move(log); }

  int32_t rank() const { return comm_.rank(); }
  int32_t size() const { return comm_.size(); }
  const ExpertMap& map() const { return map_; }
  // These two may be read from any thread.
  const ExpertLoadRecorder& load() const { return load_; }
  const EpView& view() const { return view_; }
  const ReplacementOptions& replacement_options() const { return replacement_.options(); }
  // Re-placements switched in, and bytes of expert weights this rank copied for them.
  uint64_t replacements() const { return replacements_; }
  uint64_t bytes_moved() const { return replacement_.bytes_moved(); }
  // The run so far: step times, re-placements, the load's balance before and after them. A
  // collective (it adds up the bytes every rank moved): every rank calls it at the same step.
  EpRunSummary run_summary();

  // What this rank brings to a step: nothing, one token per sequence, or prompt tokens.
  enum class StepWork { none, decode, prefill };
  // Whether any rank has tokens this step; when so, every rank runs it.
  bool join_step(StepWork work);
  // This rank is stopping: its joins say so from now on. It must go on joining (without
  // tokens) until everyone_left(), so that no rank waits on it mid-request.
  void leave() { leaving_ = true; }
  // Whether the last join found every rank leaving.
  bool everyone_left() const { return everyone_left_; }
  // The layer's FFN output for this rank's tokens into out [n_tokens, n_embd].
  void run_layer(const MoeLayerInput& in, FfnRunner& runner, float* out, ThreadPool& pool);

 private:
  // The weights of a routed expert this rank holds: regrouped at read-in or arrived by
  // copy, else the file's.
  FfnWeights weights(int64_t layer, int32_t expert) const;
  // What a copy of an expert is made of: its weights where this rank holds it; otherwise
  // the file's, typed as the holder keeps them (regrouped or not).
  FfnWeights replica_source(int64_t layer, int32_t expert) const;
  // Whether an expert's matrix with this form in the file is held regrouped.
  bool held_regrouped(const QMatrix& file) const;
  // Every rank at the same step: the plan is in place everywhere.
  void switch_placement();

  EpComm& comm_;
  ExpertMap map_;
  ExpertLoadRecorder load_;
  LiveReplacement replacement_;
  EpView view_;
  ExpertSource source_;
  std::map<std::pair<int64_t, int32_t>, OwnedExpert> owned_;  // (layer, expert) -> weights
  std::function<void(const std::string&)> log_;
  uint64_t replacements_ = 0;
  int64_t steps_ = 0;       // of the group, since the start
  std::vector<EpStepRecord> step_records_;
  std::vector<int64_t> switch_steps_;
  LiveReplacement::Clock::time_point step_started_;
  bool copying_ = false;     // during the step running
  bool prefilling_ = false;  // some rank prefills in the step running
  int64_t planned_at_ = 0;  // synced steps of load when the last plan was made
  bool leaving_ = false;
  bool regrouped_ = false;  // read_in_own_experts regrouped the q8_0 experts (on every rank)
  bool everyone_left_ = false;
  bool step_open_ = false;  // the last join started a step
  std::vector<int32_t> dest_;      // [n_tokens * k] the rank computing each pair
  std::vector<int64_t> back_row_;  // [n_tokens * k] a remote pair's row in back_recv_
  std::vector<uint8_t> send_, recv_;
  std::vector<float> inputs_, back_send_, back_recv_;
  std::vector<FfnRunner::RowRef> refs_;
};

}  // namespace moe
