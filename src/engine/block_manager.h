#pragma once
// The paged KV block manager: which of the KvStore's n_blocks blocks each sequence owns,
// and the prefix cache that lets sequences share whole blocks of an identical prefix.
// Pure bookkeeping (no KV memory, no threads): the engine thread owns one instance.
//
// Block states. Every block is in exactly one of:
//   - free:       holds nothing useful; handed out first.
//   - referenced: in the block table of ref_count >= 1 sequences.
//   - evictable:  ref_count 0 but still holds the KV of a full block registered in the
//                 prefix index, so a later request with that prefix can take it back.
//                 Kept in LRU order and reused (its index entry dropped) only when no free
//                 block is left.
//
// Prefix index. A full block is named by a hash chain (core/block_hash.h), h_i =
// XXH3_64(tokens of block i, seed = h_{i-1}) with h_{-1} = 0, so two sequences get the same
// h_i exactly when their first (i+1)*block_size tokens are equal (up to a 64-bit collision, which is ruled out by
// also comparing the block's tokens and parent hash on a match: a wrong hit would silently
// corrupt output, and the check costs block_size integer compares).
//
// No copy-on-write: a sequence only ever writes after its last, private block, and shared
// blocks are always whole (full) blocks. If a prompt is cached in its entirety, the last
// cached block is NOT shared: the match stops one block short and that block is allocated
// privately, so the engine recomputes its tokens and always has at least one prompt token
// to prefill (whose logits give the first output token).
//
// KV events. When recording, every change to the prefix index is logged as a KvEvent (a
// block entered it, was evicted from it) for the engine to publish (docs/kv_events.md).
//
// Out of blocks is never an error: can_* say whether an operation fits, and the mutating
// calls return false / nullopt and change nothing when it does not.
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv_events/events.h"

namespace moe {

class BlockManager {
 public:
  using SeqId = int64_t;

  // prefix_caching false: full blocks are never registered, so nothing is ever shared or
  // kept evictable (what a server without prefix caching does, and what the cluster
  // simulator uses when every prompt is unique).
  BlockManager(int32_t n_blocks, int32_t block_size, bool prefix_caching = true);

  int32_t n_blocks() const { return n_blocks_; }
  int32_t block_size() const { return block_size_; }

  // Blocks that hold n_tokens positions.
  int32_t blocks_for(int64_t n_tokens) const;
  // Blocks a new allocation can get: free plus evictable.
  int32_t n_available() const { return int32_t(free_.size() + lru_.size()); }
  int32_t n_free() const { return int32_t(free_.size()); }
  int32_t n_evictable() const { return int32_t(lru_.size()); }
  // Blocks referenced by some sequence.
  int32_t n_used() const { return n_blocks_ - n_available(); }
  // Fraction of blocks in use; evictable cached blocks count as unused (they can be
  // reclaimed at any time), as vLLM's kv_cache_usage_perc does.
  double usage() const { return double(n_used()) / double(n_blocks_); }
  // Admission with headroom: a new request of n_tokens fits while leaving at least
  // watermark_fraction * n_blocks blocks available for the running sequences to grow into,
  // so admitting it does not immediately force a preemption.
  bool can_admit(int64_t n_tokens, double watermark_fraction) const;

  // Leading tokens of `tokens` whose KV is already cached, in whole blocks; at most
  // tokens.size() - 1 (see the header comment). Does not change state or counters.
  int64_t match_prefix(const std::vector<int32_t>& tokens) const;
  // Blocks allocate_with_prefix(tokens) would take from the available pool (new blocks
  // plus cached blocks revived from the evictable LRU).
  int32_t blocks_needed(const std::vector<int32_t>& tokens) const;
  // Creates sequence `seq` (which must not exist) with room for all of tokens: the cached
  // prefix blocks are shared (ref count + 1) and the rest allocated fresh. Returns the
  // number of cached tokens (the engine starts prefill at that position), or nullopt and
  // no change when the blocks do not fit. Counts prefix_queries/prefix_hits only when it
  // succeeds, so a request retried until it is admitted is counted once.
  std::optional<int64_t> allocate_with_prefix(SeqId seq, const std::vector<int32_t>& tokens);

  // Whether n_new more positions fit after the sequence's current ones (a sequence not
  // yet known starts empty).
  bool can_append(SeqId seq, int64_t n_new) const;
  // Reserves n_new more positions, allocating blocks as needed; creates the sequence if
  // it does not exist. Returns false and changes nothing when the blocks do not fit.
  bool append(SeqId seq, int64_t n_new);

  // Gives back the positions past the first n_tokens (KV written for speculative tokens that
  // were rejected): blocks no longer needed go back to the free list. The positions must
  // lie past every block registered in the prefix index.
  void truncate(SeqId seq, int64_t n_tokens);

  // Registers every full block among the first tokens.size() positions of seq in the
  // prefix index (blocks registered before are skipped). tokens are the sequence's token
  // ids from position 0, and the caller promises their KV has been written; tokens.size()
  // must not exceed the positions reserved. If another block already holds the same
  // prefix, this one stays private and goes back to the free list when released.
  void commit_full_blocks(SeqId seq, const std::vector<int32_t>& tokens);

  // Releases the sequence's blocks: shared ones lose a reference; unreferenced ones go to
  // the evictable LRU if cached, else to the free list. Unknown seq: no-op.
  void free(SeqId seq);

  bool has(SeqId seq) const { return seqs_.count(seq) != 0; }
  const std::vector<int32_t>& table(SeqId seq) const;
  // Positions reserved for the sequence.
  int64_t num_tokens(SeqId seq) const;
  size_t n_seqs() const { return seqs_.size(); }

  int32_t ref_count(int32_t block) const { return blocks_[size_t(block)].ref; }
  bool is_cached(int32_t block) const { return blocks_[size_t(block)].cached; }

  // Prompt tokens looked up in the prefix cache, and how many of them were hits.
  uint64_t prefix_queries() const { return prefix_queries_; }
  uint64_t prefix_hits() const { return prefix_hits_; }

  // Logs prefix-index changes from now on; off by default, since nobody may take them.
  void record_events() { recording_ = true; }
  // The changes logged since the last call, in order.
  std::vector<kv_events::KvEvent> take_events() { return std::exchange(events_, {}); }
  // Every hash in the prefix index, in no particular order.
  std::vector<uint64_t> cached_hashes() const;

  // Internal consistency (free list, LRU and index agree with every block's state);
  // empty when consistent, else what is wrong. For tests.
  std::string validate() const;

 private:
  struct Block {
    int32_t ref = 0;
    bool cached = false;  // index_[hash] == this block
    uint64_t hash = 0, parent_hash = 0;
    std::vector<int32_t> tokens;  // the block's token ids while cached (collision check)
    std::list<int32_t>::iterator lru_it;  // valid while evictable
  };
  struct Seq {
    std::vector<int32_t> table;
    int64_t n_tokens = 0;
    // Chain hashes of the full blocks registered so far (from a prefix hit or a commit),
    // including ones left private because another block held the same prefix.
    std::vector<uint64_t> hashes;
  };

  // The cached blocks matching tokens' leading whole blocks, at most (size - 1) / bs.
  std::vector<int32_t> cached_prefix(const std::vector<int32_t>& tokens,
                                     std::vector<uint64_t>* hashes) const;
  // A block for new data: a free one, else the least recently used evictable one, its
  // index entry dropped. Callers check n_available() first.
  int32_t take_fresh();
  void uncache(int32_t block);
  // Logs that the block with this hash (child of parent; block i of its sequence) entered
  // the index, extending the last stored chain when it is that chain's next block.
  void log_stored(uint64_t hash, uint64_t parent, size_t i);

  int32_t n_blocks_, block_size_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;   // used as a stack
  std::list<int32_t> lru_;      // front = least recently released, evicted first
  std::unordered_map<uint64_t, int32_t> index_;
  std::unordered_map<SeqId, Seq> seqs_;
  uint64_t prefix_queries_ = 0, prefix_hits_ = 0;
  bool recording_ = false;
  bool prefix_caching_ = true;
  std::vector<kv_events::KvEvent> events_;
};

}  // namespace moe
