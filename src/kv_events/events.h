#pragma once
// KV events: what an engine instance tells the global scheduler about its prefix cache,
// so that requests can be routed to the instance already holding their prompt's blocks.
// A block is named by its chain hash (core/block_hash.h); the wire format, topics and
// sequence numbers are in docs/kv_events.md.
#include <cstdint>
#include <optional>
#include <variant>
#include <vector>

namespace moe::kv_events {

// Full blocks entered the prefix index: a chain, each block the child of the one before.
struct BlocksStored {
  // The hash of the block before hashes[0]; none when hashes[0] is a sequence's first block.
  std::optional<uint64_t> parent;
  std::vector<uint64_t> hashes;
  int32_t block_size = 0;  // tokens per block
  bool operator==(const BlocksStored&) const = default;
};

// Blocks left the prefix index (evicted for other data).
struct BlocksRemoved {
  std::vector<uint64_t> hashes;
  bool operator==(const BlocksRemoved&) const = default;
};

// The prefix index is empty: every block known before is gone. The first message of every
// publisher (seq 1) carries it, so a subscriber that sees seq 1 knows the whole state.
struct AllCleared {
  bool operator==(const AllCleared&) const = default;
};

using KvEvent = std::variant<BlocksStored, BlocksRemoved, AllCleared>;

// Every block an instance holds, with the sequence number of the last message published
// before it was taken: messages up to seq are reflected in it, later ones are not.
struct KvSnapshot {
  uint64_t seq = 0;
  int32_t block_size = 0;
  std::vector<uint64_t> hashes;
};

}  // namespace moe::kv_events
