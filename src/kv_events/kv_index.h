#pragma once
// Which prefix-cache blocks each engine instance holds, as its KV events say: the global
// scheduler's view for routing by prefix locality. Pure data, no threads or sockets
// (KvEventSubscriber feeds it from the network and guards it with a lock).
//
// Sync. An instance is in sync while it has seen every message since its last snapshot
// (or since a message with seq 1, which starts a publisher's stream with AllCleared). A
// message whose seq is not the next one (lost messages, a restarted publisher, a
// subscriber that joined late) or that could not be decoded puts it out of sync: its
// owner then fetches a snapshot (GET /internal/kv/blocks) and calls reset(). Meanwhile
// later messages are held back and replayed after the snapshot, so a snapshot that took
// a while to arrive still brings the instance back in sync. Out of sync, queries answer
// from the blocks last known: a routing hint that may be stale, never wrong output.
#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "kv_events/events.h"

namespace moe::kv_events {

class KvIndex {
 public:
  // Messages held back per out-of-sync instance; older ones are dropped beyond this, which
  // the next reset() notices as a gap.
  static constexpr size_t kMaxHeld = 1024;

  // A new instance holds no blocks and is out of sync until its first snapshot or seq 1.
  // Adding one already present changes nothing.
  void add(const std::string& instance);
  void remove(const std::string& instance);
  bool has(const std::string& instance) const { return instances_.count(instance) != 0; }

  // One message of an instance's stream (unknown instances are ignored). True when this
  // message put the instance out of sync: fetch a snapshot and reset().
  [[nodiscard]] bool apply(const std::string& instance, uint64_t seq, const std::vector<KvEvent>& events);
  // A message of the instance that could not be decoded: its blocks can no longer be
  // trusted. True when it was in sync until now.
  [[nodiscard]] bool lose_sync(const std::string& instance);
  // The instance's blocks become the snapshot's, then held messages newer than it are
  // replayed. False when they do not continue the snapshot (some were lost): the instance
  // stays out of sync and needs a newer snapshot. Unknown instances: false. A snapshot no
  // newer than the messages an in-sync instance has applied changes nothing.
  [[nodiscard]] bool reset(const std::string& instance, const KvSnapshot& snapshot);

  bool synced(const std::string& instance) const;
  // Instances waiting for a snapshot, by name.
  std::vector<std::string> out_of_sync() const;
  // Blocks held by the instance; 0 when unknown.
  size_t n_blocks(const std::string& instance) const;
  // Tokens per block, as the instance last said (0 before it said): the block size to hash
  // prompts with for matched_blocks.
  int32_t block_size(const std::string& instance) const;

  // How many of prompt_hashes' leading blocks (h_0, h_1, ... of core/block_hash.h) the
  // instance holds, all of them: the prefix it would not have to recompute.
  size_t matched_blocks(const std::string& instance, std::span<const uint64_t> prompt_hashes) const;
  struct Match {
    std::string instance;
    size_t blocks = 0;
    bool operator==(const Match&) const = default;
  };
  // matched_blocks for every instance, by instance name.
  std::vector<Match> matches(std::span<const uint64_t> prompt_hashes) const;

 private:
  struct Held {
    uint64_t seq;
    std::vector<KvEvent> events;
  };
  struct Instance {
    std::unordered_set<uint64_t> blocks;
    int32_t block_size = 0;
    bool synced = false;
    uint64_t last_seq = 0;  // of the last message applied (or the snapshot's), while synced
    std::deque<Held> held;  // while out of sync, in arrival order
  };

  static void apply_events(Instance& in, const std::vector<KvEvent>& events);
  static size_t prefix_held(const Instance& in, std::span<const uint64_t> prompt_hashes);

  std::map<std::string, Instance, std::less<>> instances_;
};

}  // namespace moe::kv_events
