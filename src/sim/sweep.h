#pragma once
// moengine sim sweep: one simulation per value (or pair of values) of one or two fields,
// and the configuration with the most goodput per device under the SLOs.
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/results.h"
#include "sim/sim_config.h"

namespace moe::sim {

struct Vary {
  std::string key;  // dotted path in the config, e.g. deployment.decode.instances
  std::vector<std::string> values;
};

// "KEY=V1,V2,..."; throws moe::Error for anything else.
Vary parse_vary(const std::string& arg);

struct SweepRow {
  std::vector<std::string> values;  // one per Vary
  Summary summary;
  nlohmann::json json;  // to_json of the run
  int64_t devices = 0;
  double goodput_per_device = 0;
};

struct SweepResult {
  std::vector<Vary> varies;
  std::vector<SweepRow> rows;
  size_t best = 0;  // the row with the most goodput per device
};

// progress(done, total) after each run.
SweepResult sweep(const std::string& path, const std::vector<Vary>& varies, const ModelFileReader& reader,
                  const std::function<void(size_t, size_t)>& progress);
std::string sweep_table(const SweepResult& result);
nlohmann::json sweep_json(const SweepResult& result);
// goodput.svg (goodput against the first field, a line per value of the second) and
// latency.svg (TTFT and TPOT p50 and p99 against the requests completed per second).
void write_sweep_svgs(const SweepResult& result, const std::string& dir);

}  // namespace moe::sim
