#pragma once
// What a simulation predicts, summarised the way serving benchmarks report it: throughput
// per pool (per device and per node), latency percentiles, goodput under the SLOs.
#include <nlohmann/json.hpp>

#include <string>

#include "sim/sim_config.h"
#include "sim/simulator.h"

namespace moe::sim {

struct Percentiles {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
  int64_t count = 0;
};

struct Summary {
  int64_t arrived = 0, completed = 0, rejected = 0, preemptions = 0;
  Percentiles ttft_s, tpot_s, e2e_s;
  double tokens_per_s_per_user = 0;  // mean over requests of their decode speed, 1 / TPOT
  double goodput_rps = 0;            // requests meeting every SLO, per second of the window
  double window_s = 0;
};

Summary summarize(const SimConfig& config, const SimResult& result);
// The --json document: the keys docs/simulator.md lists.
nlohmann::json to_json(const SimConfig& config, const SimResult& result, const Summary& summary);
// The table printed on stdout.
std::string to_table(const SimConfig& config, const SimResult& result, const Summary& summary);

}  // namespace moe::sim
