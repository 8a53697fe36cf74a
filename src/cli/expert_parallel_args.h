#pragma once
// The options of commands that can run as one rank of an expert-parallel group (--ep,
// --placement, --ep-timeout-s), and the group they set up for a loaded model.
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "model/model.h"
#include "moe/ep_comm.h"
#include "moe/expert_parallel.h"

namespace moe::cli {

struct ExpertParallelArgs {
  int ep = 0;  // 0: no group
  std::string placement;
  double timeout_s = 120;
  std::string trace_out;
  int64_t trace_steps = 1024;
  double replace_interval_s = 0;
  int64_t replace_max_moves = 16;
  double replace_target_balance = 0.97;
};

void add_expert_parallel_options(CLI::App& cmd, ExpertParallelArgs& args);

// This process's place in the group; rank 0 of 1 when there is none.
struct EpGroup {
  std::unique_ptr<EpComm> comm;
  std::unique_ptr<ExpertParallel> ep;
  int32_t rank() const { return comm ? comm->rank() : 0; }
  int32_t size() const { return comm ? comm->size() : 1; }
};

// Joins the ranks mpirun started (--ep 1 runs the group's code path in one process) before
// anything else is done, so that every rank fails alike on bad arguments. Throws moe::Error
// when --ep does not match what mpirun started.
EpGroup join_expert_parallel_group(const ExpertParallelArgs& args);
// Gives the model its experts' placement over the group (from --placement, else even).
void attach_expert_parallel(EpGroup& group, const ExpertParallelArgs& args, Model& model);
// At the end of a run, on every rank of the group together: rank 0 prints the run's summary
// (step times, re-placements, the load's balance) and writes the group's recorded expert
// load to --expert-trace-out, when given.
void finish_expert_parallel_run(const EpGroup& group, const ExpertParallelArgs& args);

}  // namespace moe::cli
