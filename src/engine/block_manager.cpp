#include "engine/block_manager.h"

#include <algorithm>
#include <stdexcept>

#include "core/block_hash.h"

namespace moe {

BlockManager::BlockManager(int32_t n_blocks, int32_t block_size, bool prefix_caching)
    : n_blocks_(n_blocks), block_size_(block_size), blocks_(size_t(std::max(n_blocks, 0))), prefix_caching_(prefix_caching) {
  if (n_blocks <= 0 || block_size <= 0) throw std::invalid_argument("BlockManager: n_blocks and block_size must be positive");
  // Pushed in reverse so that blocks are handed out 0, 1, 2, ...: deterministic tables.
  free_.reserve(size_t(n_blocks));
  for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int32_t BlockManager::blocks_for(int64_t n_tokens) const {
  return int32_t((n_tokens + block_size_ - 1) / block_size_);
}

bool BlockManager::can_admit(int64_t n_tokens, double watermark_fraction) const {
  const double reserve = watermark_fraction * double(n_blocks_);
  return double(blocks_for(n_tokens)) <= double(n_available()) - reserve;
}

std::vector<int32_t> BlockManager::cached_prefix(const std::vector<int32_t>& tokens,
                                                 std::vector<uint64_t>* hashes) const {
  std::vector<int32_t> found;
  if (tokens.empty()) return found;
  // One block short of a fully cached prompt: the engine must prefill at least one token.
  const size_t max_blocks = (tokens.size() - 1) / size_t(block_size_);
  uint64_t parent = kRootParentHash;
  for (size_t i = 0; i < max_blocks; ++i) {
    const int32_t* t = tokens.data() + i * size_t(block_size_);
    const uint64_t h = block_hash(parent, t, size_t(block_size_));
    const auto it = index_.find(h);
    if (it == index_.end()) break;
    const Block& b = blocks_[size_t(it->second)];
    if (b.parent_hash != parent || !std::equal(b.tokens.begin(), b.tokens.end(), t)) break;
    found.push_back(it->second);
    if (hashes) hashes->push_back(h);
    parent = h;
  }
  return found;
}

int64_t BlockManager::match_prefix(const std::vector<int32_t>& tokens) const {
  return int64_t(cached_prefix(tokens, nullptr).size()) * block_size_;
}

int32_t BlockManager::blocks_needed(const std::vector<int32_t>& tokens) const {
  const std::vector<int32_t> prefix = cached_prefix(tokens, nullptr);
  int32_t revive = 0;
  for (int32_t b : prefix) revive += blocks_[size_t(b)].ref == 0 ? 1 : 0;
  return revive + blocks_for(int64_t(tokens.size())) - int32_t(prefix.size());
}

void BlockManager::uncache(int32_t block) {
  Block& b = blocks_[size_t(block)];
  if (!b.cached) return;
  index_.erase(b.hash);
  b.cached = false;
  b.tokens.clear();
  if (!recording_) return;
  // Evictions come in runs (one allocation may take several blocks): one event for a run.
  auto* last = events_.empty() ? nullptr : std::get_if<kv_events::BlocksRemoved>(&events_.back());
  if (last) {
    last->hashes.push_back(b.hash);
  } else {
    events_.emplace_back(kv_events::BlocksRemoved{{b.hash}});
  }
}

std::vector<uint64_t> BlockManager::cached_hashes() const {
  std::vector<uint64_t> hashes;
  hashes.reserve(index_.size());
  for (const auto& [h, block] : index_) hashes.push_back(h);
  return hashes;
}

int32_t BlockManager::take_fresh() {
  int32_t block;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else {
    // Only when nothing plain is left do we give up cached KV, oldest release first.
    block = lru_.front();
    lru_.pop_front();
    uncache(block);
  }
  blocks_[size_t(block)].ref = 1;
  return block;
}

std::optional<int64_t> BlockManager::allocate_with_prefix(SeqId seq, const std::vector<int32_t>& tokens) {
  if (has(seq)) throw std::logic_error("BlockManager::allocate_with_prefix: sequence already exists");
  std::vector<uint64_t> hashes;
  const std::vector<int32_t> prefix = cached_prefix(tokens, &hashes);
  int32_t revive = 0;
  for (int32_t b : prefix) revive += blocks_[size_t(b)].ref == 0 ? 1 : 0;
  const int32_t fresh = blocks_for(int64_t(tokens.size())) - int32_t(prefix.size());
  if (revive + fresh > n_available()) return std::nullopt;

  Seq s;
  s.table.reserve(size_t(fresh) + prefix.size());
  // Take the cached blocks before any fresh one, so eviction cannot pick a block of the
  // very prefix being reused.
  for (int32_t b : prefix) {
    Block& blk = blocks_[size_t(b)];
    if (blk.ref == 0) lru_.erase(blk.lru_it);
    ++blk.ref;
    s.table.push_back(b);
  }
  for (int32_t i = 0; i < fresh; ++i) s.table.push_back(take_fresh());
  s.n_tokens = int64_t(tokens.size());
  s.hashes = std::move(hashes);
  seqs_.emplace(seq, std::move(s));

  const int64_t hit = int64_t(prefix.size()) * block_size_;
  prefix_queries_ += tokens.size();
  prefix_hits_ += uint64_t(hit);
  return hit;
}

bool BlockManager::can_append(SeqId seq, int64_t n_new) const {
  const auto it = seqs_.find(seq);
  const int64_t have = it == seqs_.end() ? 0 : it->second.n_tokens;
  const int32_t held = it == seqs_.end() ? 0 : int32_t(it->second.table.size());
  return blocks_for(have + n_new) - held <= n_available();
}

bool BlockManager::append(SeqId seq, int64_t n_new) {
  if (n_new < 0) throw std::invalid_argument("BlockManager::append: negative token count");
  if (!can_append(seq, n_new)) return false;
  Seq& s = seqs_[seq];
  s.n_tokens += n_new;
  while (int32_t(s.table.size()) < blocks_for(s.n_tokens)) s.table.push_back(take_fresh());
  return true;
}

void BlockManager::truncate(SeqId seq, int64_t n_tokens) {
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) throw std::logic_error("BlockManager::truncate: unknown sequence");
  Seq& s = it->second;
  if (n_tokens < 0 || n_tokens > s.n_tokens) throw std::invalid_argument("BlockManager::truncate: not within the positions reserved");
  if (size_t(blocks_for(n_tokens)) < s.hashes.size())
    throw std::logic_error("BlockManager::truncate: would drop a block registered in the prefix index");
  s.n_tokens = n_tokens;
  // The dropped blocks lie past every registered block, so they are private and uncached.
  while (int32_t(s.table.size()) > blocks_for(n_tokens)) {
    Block& b = blocks_[size_t(s.table.back())];
    --b.ref;
    free_.push_back(s.table.back());
    s.table.pop_back();
  }
}

void BlockManager::commit_full_blocks(SeqId seq, const std::vector<int32_t>& tokens) {
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) throw std::logic_error("BlockManager::commit_full_blocks: unknown sequence");
  Seq& s = it->second;
  if (int64_t(tokens.size()) > s.n_tokens)
    throw std::invalid_argument("BlockManager::commit_full_blocks: more tokens than positions reserved");
  if (!prefix_caching_) return;
  const size_t n_full = tokens.size() / size_t(block_size_);
  for (size_t i = s.hashes.size(); i < n_full; ++i) {
    const uint64_t parent = i == 0 ? kRootParentHash : s.hashes[i - 1];
    const int32_t* t = tokens.data() + i * size_t(block_size_);
    const uint64_t h = block_hash(parent, t, size_t(block_size_));
    s.hashes.push_back(h);
    Block& b = blocks_[size_t(s.table[i])];
    // An equal prefix already cached elsewhere (two requests prefilled it at once) keeps
    // its block; this copy stays private.
    if (b.cached || index_.count(h)) continue;
    b.cached = true;
    b.hash = h;
    b.parent_hash = parent;
    b.tokens.assign(t, t + block_size_);
    index_.emplace(h, s.table[i]);
    if (recording_) log_stored(h, parent, i);
  }
}

void BlockManager::log_stored(uint64_t hash, uint64_t parent, size_t i) {
  if (!events_.empty()) {
    auto* last = std::get_if<kv_events::BlocksStored>(&events_.back());
    if (last && last->hashes.back() == parent) {
      last->hashes.push_back(hash);
      return;
    }
  }
  events_.emplace_back(kv_events::BlocksStored{i == 0 ? std::nullopt : std::optional(parent), {hash}, block_size_});
}

void BlockManager::free(SeqId seq) {
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  const std::vector<int32_t>& table = it->second.table;
  // Tail first: the LRU then evicts a chain's later blocks before its earlier ones, which
  // more requests share (and a chain is useless past its first evicted block anyway).
  for (auto b = table.rbegin(); b != table.rend(); ++b) {
    Block& blk = blocks_[size_t(*b)];
    if (--blk.ref > 0) continue;
    if (blk.cached) {
      blk.lru_it = lru_.insert(lru_.end(), *b);
    } else {
      free_.push_back(*b);
    }
  }
  seqs_.erase(it);
}

const std::vector<int32_t>& BlockManager::table(SeqId seq) const {
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) throw std::out_of_range("BlockManager::table: unknown sequence");
  return it->second.table;
}

int64_t BlockManager::num_tokens(SeqId seq) const {
  const auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.n_tokens;
}

std::string BlockManager::validate() const {
  const size_t n = size_t(n_blocks_);
  std::vector<int> in_free(n, 0), in_lru(n, 0), refs(n, 0);
  for (int32_t b : free_) ++in_free[size_t(b)];
  for (int32_t b : lru_) ++in_lru[size_t(b)];
  for (const auto& [id, s] : seqs_) {
    if (int32_t(s.table.size()) != blocks_for(s.n_tokens))
      return "seq " + std::to_string(id) + ": table size does not match its positions";
    if (s.hashes.size() > s.table.size()) return "seq " + std::to_string(id) + ": more hashes than blocks";
    std::vector<int32_t> sorted = s.table;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      return "seq " + std::to_string(id) + ": a block twice in one table";
    for (int32_t b : s.table) ++refs[size_t(b)];
  }
  for (size_t b = 0; b < n; ++b) {
    const Block& blk = blocks_[b];
    const std::string name = "block " + std::to_string(b);
    if (blk.ref != refs[b]) return name + ": ref count " + std::to_string(blk.ref) + " but in " + std::to_string(refs[b]) + " tables";
    if ((blk.ref > 0) + in_free[b] + in_lru[b] != 1) return name + ": not in exactly one of referenced/free/evictable";
    if (in_lru[b] && !blk.cached) return name + ": evictable but not cached";
    if (in_free[b] && blk.cached) return name + ": free but still cached";
    if (in_lru[b] && *blk.lru_it != int32_t(b)) return name + ": stale LRU position";
    if (blk.cached) {
      const auto it = index_.find(blk.hash);
      if (it == index_.end() || it->second != int32_t(b)) return name + ": cached but not indexed";
    }
  }
  for (const auto& [h, b] : index_)
    if (!blocks_[size_t(b)].cached || blocks_[size_t(b)].hash != h) return "index entry for a block not cached under it";
  return {};
}

}  // namespace moe
