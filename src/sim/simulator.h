#pragma once
// The discrete-event simulation of a whole deployment: requests arrive, the proxy routes
// each leg with the real policies (src/proxy/policy) over views the instances fill, P and
// unified instances step with the engine's scheduler, D instances with the aggregate of
// decode_instance.h, KV moves P to D over the chosen link, and every step's time comes
// from the cost model. Deterministic: the same config gives the same result.
//
// Time advances from event to event (an arrival, the end of an instance's step, the end of
// a KV transfer); an instance with work starts its next step the moment its last one ends.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "sim/cost_model.h"
#include "sim/expert_balance.h"
#include "sim/sim_config.h"
#include "sim/sim_request.h"
#include "sim/workload.h"

namespace moe::sim {

struct PoolResult {
  std::string name;  // prefill, decode or unified
  int32_t instances = 0, devices = 0;  // devices: over all instances
  double nodes = 0;
  int32_t ranks_per_instance = 0;
  int64_t kv_capacity_tokens_per_rank = 0;
  double weight_gib_per_device = 0;
  double busy_fraction = 0;           // of the run, averaged over instances
  double mean_running_per_rank = 0;   // decode: sequences in the batch, averaged over steps
  int64_t steps = 0;
  double input_tokens = 0, output_tokens = 0;  // within the measurement window
  ExpertBalance balance;
  StepBreakdown mean_step;  // the mean step's time and where it went
};

struct SimResult {
  std::vector<SimRequest> requests;
  std::vector<PoolResult> pools;
  double window_begin_s = 0, window_end_s = 0;  // throughput is measured over this
  double end_s = 0;                             // the last event
  std::map<std::string, int64_t> routing;       // "leg/reason" -> decisions
  int64_t events = 0;
  double wall_s = 0;
  // What is still held once every request has ended: all zero in a consistent run.
  int64_t blocks_in_use_at_end = 0, sequences_at_end = 0;
  double decode_kv_tokens_at_end = 0;
  std::string block_check;
  // Requests that never ended because nothing was left to happen (a stalled deployment);
  // they are counted as rejected too.
  int64_t stalled = 0;  // BlockManager::validate of every rank, "" when consistent
};

SimResult simulate(const SimConfig& config, const std::vector<TracedRequest>& trace = {});

}  // namespace moe::sim
