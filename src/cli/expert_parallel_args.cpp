#include "cli/expert_parallel_args.h"

#include <chrono>
#include <cstdio>

#include "cli/model_loading.h"
#include "core/error.h"
#include "moe/mpi_comm.h"
#include "placement/placement.h"

namespace moe::cli {

void add_expert_parallel_options(CLI::App& cmd, ExpertParallelArgs& args) {
  cmd.add_option("--ep", args.ep,
                 "Expert parallelism over N processes started by mpirun (mpirun -np N ... --ep N): each rank holds the "
                 "routed experts its placement gives it; 1 runs the same code in one process")
      ->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--placement", args.placement,
                 "Which rank holds which experts: a placement file of `moengine placement` with one device per rank "
                 "(default: experts spread evenly, no replicas)");
  cmd.add_option("--ep-timeout-s", args.timeout_s,
                 "Longest wait for the other ranks in one exchange before giving up with an error")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_option("--expert-trace-out", args.trace_out,
                 "At exit, rank 0 writes the group's expert load of the last --expert-trace-steps steps here: the "
                 ".npy trace `moengine placement` reads, f32 [steps, MoE layers, experts]");
  cmd.add_option("--expert-trace-steps", args.trace_steps, "Steps of expert load each rank keeps")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->capture_default_str();
  cmd.add_option("--replace-interval-s", args.replace_interval_s,
                 "Live re-placement: every S seconds plan a new placement from the recorded load (incremental, at "
                 "most --replace-max-moves expert copies), copy the moved experts' weights while serving and switch at a "
                 "step all ranks agree on; 0: off")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd.add_option("--replace-max-moves", args.replace_max_moves, "Expert copies one re-placement may make")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->capture_default_str();
  cmd.add_option("--replace-target-balance", args.replace_target_balance,
                 "A re-placement moves nothing once the recorded load's planning balance (mean over busiest device "
                 "load, docs/placement.md) reaches this")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
}

namespace {

// Every rank meets the same bad argument (they all read the same command line and files):
// each says so, then waits (a little) for the others to say it too before exiting, since
// the first rank to exit makes mpirun stop the rest.
template <typename F>
auto on_every_rank(EpComm& comm, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    if (comm.size() == 1) throw;
    std::fprintf(stderr, "error: rank %d: %s\n", comm.rank(), e.what());
    comm.meet_within(std::chrono::seconds(5));
    throw ReportedError(e.what());
  }
}

}  // namespace

EpGroup join_expert_parallel_group(const ExpertParallelArgs& args) {
  EpGroup g;
  if (args.ep == 0) {
    if (!args.placement.empty()) fail("--placement needs --ep");
    if (!args.trace_out.empty()) fail("--expert-trace-out needs --ep (--ep 1 records in one process)");
    if (args.replace_interval_s > 0) fail("--replace-interval-s needs --ep");
    if (MpiComm::launched_by_mpirun()) fail("started by mpirun without --ep: give --ep N for N ranks");
    return g;
  }
  if (args.ep == 1 && !MpiComm::launched_by_mpirun()) {
    g.comm = std::make_unique<SoloComm>();
    return g;
  }
  if (!MpiComm::launched_by_mpirun()) {
    fail("--ep {0} needs its {0} ranks started by mpirun: mpirun -np {0} moengine ... --ep {0}", args.ep);
  }
  const auto timeout = std::chrono::milliseconds(int64_t(args.timeout_s * 1000));
  auto comm = std::make_unique<MpiComm>(timeout);
  on_every_rank(*comm, [&] {
    if (comm->size() != args.ep) fail("--ep {} but mpirun started {} ranks", args.ep, comm->size());
  });
  g.comm = std::move(comm);
  return g;
}

void attach_expert_parallel(EpGroup& group, const ExpertParallelArgs& args, Model& model) {
  if (!group.comm) return;
  const ModelConfig& c = model.config();
  const int64_t moe_layers = c.n_moe_layers();
  if (moe_layers == 0) fail("expert parallelism needs an MoE model; this one has no MoE layers");
  ExpertMap map = on_every_rank(*group.comm, [&] {
    return args.placement.empty() ? ExpertMap::even(moe_layers, c.gating.n_experts, group.size())
                                  : ExpertMap::from_placement(placement::read_placement(args.placement), moe_layers,
                                                              c.gating.n_experts, group.size(), args.placement);
  });
  ReplacementOptions ro;
  ro.interval = std::chrono::duration<double>(args.replace_interval_s);
  ro.max_moves = args.replace_max_moves;
  ro.target_balance = args.replace_target_balance;
  group.ep = std::make_unique<ExpertParallel>(*group.comm, std::move(map), args.trace_steps, ro);
  if (group.rank() == 0) group.ep->set_log([](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
  model.set_expert_parallel(group.ep.get());
  const uint64_t bytes = group.ep->read_in_own_experts();
  int64_t held = 0;
  for (int64_t l = 0; l < moe_layers; ++l) held += int64_t(group.ep->map().experts_on(l, group.rank()).size());
  std::fprintf(stderr, "ep: rank %d of %d holds %lld expert replicas over %lld MoE layers (%.0f MiB read), %.0f MiB resident\n",
               group.rank(), group.size(), (long long)held, (long long)moe_layers, double(bytes) / 1048576.0, resident_mib());
}

void finish_expert_parallel_run(const EpGroup& group, const ExpertParallelArgs& args) {
  if (!group.ep) return;
  const EpRunSummary summary = group.ep->run_summary();
  if (group.rank() != 0) return;
  std::fprintf(stderr, "%s\n", describe(summary).c_str());
  if (args.trace_out.empty()) return;
  const placement::Trace trace = group.ep->load().window();
  if (trace.steps == 0) {
    std::fprintf(stderr, "expert trace: no step ran; %s not written\n", args.trace_out.c_str());
    return;
  }
  placement::write_trace(args.trace_out, trace);
  std::fprintf(stderr, "expert trace: %lld steps x %lld MoE layers x %lld experts written to %s\n", (long long)trace.steps,
               (long long)trace.layers, (long long)trace.experts, args.trace_out.c_str());
}

}  // namespace moe::cli
