#pragma once
// Live re-placement of an expert-parallel group's routed experts: a new placement planned
// from the group's recorded load with the planner's incremental mode (a bounded number of
// expert copies), the moved replicas' weights copied between ranks in chunks while steps go
// on, and the switch to the new placement left to a step all ranks agree on
// (ExpertParallel::join_step). No step waits for a copy.
//
// Every rank plans from the same window and the same current placement, so every rank
// computes the same plan and the same list of copies without exchanging them.
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "moe/ep_comm.h"
#include "moe/expert_map.h"
#include "moe/ffn_jobs.h"
#include "placement/trace.h"

namespace moe {

struct ReplacementOptions {
  std::chrono::duration<double> interval{0};  // between plans; 0: never
  int64_t max_moves = 16;                     // expert copies per plan
  // A plan stops once the window's planning balance (placement.md) reaches this: moves that
  // would only polish an already even placement are not worth their copies.
  double target_balance = 0.97;
  int64_t chunk_bytes = int64_t(1) << 20;     // one message of a copy
  size_t in_flight = 4;                       // chunks outstanding per direction
};

// A replica that arrived from another rank: its weights in memory of its own.
struct OwnedExpert {
  std::shared_ptr<uint8_t> bytes;  // 64-byte aligned; gate, then up, then down
  FfnWeights w;
};

// Memory for one expert's weights laid out like `shape`'s (same types, sizes and row
// strides): gate, up, down, each 64-byte aligned as the kernels' loads prefer.
OwnedExpert allocate_expert_like(const FfnWeights& shape);
// The bytes that layout takes, and the expert placed in `memory` (that many bytes,
// 64-byte aligned; the expert keeps it alive).
size_t expert_bytes_like(const FfnWeights& shape);
OwnedExpert place_expert_like(const FfnWeights& shape, std::shared_ptr<uint8_t> memory);

// The weights of a routed expert this rank holds (file-mapped, or an OwnedExpert).
using ExpertSource = std::function<FfnWeights(int64_t moe_layer, int32_t expert)>;

class LiveReplacement {
 public:
  using Clock = std::chrono::steady_clock;
  explicit LiveReplacement(ReplacementOptions options);

  const ReplacementOptions& options() const { return options_; }
  bool in_progress() const { return next_map_ != nullptr; }
  // Whether the interval passed since the last plan (rank 0 asks the group for one).
  bool due(Clock::time_point now) const;

  struct Plan {
    int64_t moves = 0;
    double balance_before = 0, balance_after = 0;
    uint64_t bytes = 0;  // of all ranks' copies
  };
  // Every rank at the same step: plans from `window` and starts this rank's copies. Nothing
  // is in progress afterwards when the plan moves nothing.
  Plan start(const placement::Trace& window, const ExpertMap& current, int32_t me, const ExpertSource& weights);
  // Starts and polls this rank's chunks; true once all of them are done.
  bool advance(EpComm& comm);

  struct Arrived {
    int64_t layer;
    int32_t expert;
    OwnedExpert weights;
  };
  // At the switch: the new map, and the replicas that arrived here.
  ExpertMap take_map();
  std::vector<Arrived> take_arrived();

  uint64_t bytes_moved() const { return bytes_moved_; }  // this rank's copies started, sent and received

 private:
  struct Chunk {
    int32_t peer;
    const uint8_t* from;  // a send's data
    uint8_t* to;          // a receive's buffer
    int64_t bytes;
  };

  ReplacementOptions options_;
  Clock::time_point last_plan_;
  std::unique_ptr<ExpertMap> next_map_;
  std::vector<Arrived> arrived_;
  // In the order both sides of each pair start them.
  std::vector<Chunk> sends_, recvs_;
  size_t next_send_ = 0, next_recv_ = 0;
  std::deque<EpComm::Transfer> sending_, receiving_;
  uint64_t bytes_moved_ = 0;
};

}  // namespace moe
