#pragma once
// What a run of an expert-parallel group looked like, for `generate --ep` to report and the
// re-placement benchmark to read: step times (all of them, and those taken while expert
// weights were being copied) and how evenly the ranks' experts shared the work before the
// first re-placement and after the last one.
#include <cstdint>
#include <string>
#include <vector>

namespace moe {

struct EpStepRecord {
  double ms = 0;            // from this step's join to the next one's, on this rank
  bool copying = false;     // expert weights were being copied meanwhile
  bool prefilling = false;  // some rank prefilled prompt tokens in it
};

// Step times of some of a run's steps (all 0 when there are none).
struct EpStepTimes {
  int64_t steps = 0;
  double median_ms = 0, p90_ms = 0, max_ms = 0;
};

struct EpRunSummary {
  int64_t steps = 0;
  double median_ms = 0;
  // All steps, split by whether expert weights were being copied during them.
  EpStepTimes copying, other;
  // The same for the decode-only steps (no rank prefilling). A step waits for its slowest
  // rank, so a prefill on any rank makes it long whenever it comes: these say what the
  // copies alone cost.
  EpStepTimes decode, decode_copying, decode_other;
  int64_t switches = 0;
  uint64_t bytes_moved = 0;
  // layer_imbalance (expert_load.h) of the steps before the first switch and after the
  // last (0 when there are none).
  double imbalance_before = 0, imbalance_after = 0;
};

// `steps`: every step of the run; `switch_steps`: the steps at which a re-placement was
// switched in; `rank_pairs`: per step of the recorded window, the pairs each rank computed
// in each layer ([steps][layers * ranks]), the last rank_pairs.size() steps of the run.
EpRunSummary summarize_run(const std::vector<EpStepRecord>& steps, const std::vector<int64_t>& switch_steps,
                           const std::vector<std::vector<int64_t>>& rank_pairs, int64_t layers, int32_t ranks,
                           uint64_t bytes_moved);
// One line: "ep: 200 steps, median 1.20 ms; ..."
std::string describe(const EpRunSummary& s);

}  // namespace moe
