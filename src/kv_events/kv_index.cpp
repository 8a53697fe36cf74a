#include "kv_events/kv_index.h"

namespace moe::kv_events {

void KvIndex::add(const std::string& instance) { instances_.try_emplace(instance); }

void KvIndex::remove(const std::string& instance) { instances_.erase(instance); }

void KvIndex::apply_events(Instance& in, const std::vector<KvEvent>& events) {
  for (const KvEvent& e : events) {
    if (const auto* s = std::get_if<BlocksStored>(&e)) {
      in.blocks.insert(s->hashes.begin(), s->hashes.end());
      in.block_size = s->block_size;
    } else if (const auto* r = std::get_if<BlocksRemoved>(&e)) {
      for (uint64_t h : r->hashes) in.blocks.erase(h);
    } else {
      in.blocks.clear();
    }
  }
}

bool KvIndex::apply(const std::string& instance, uint64_t seq, const std::vector<KvEvent>& events) {
  const auto it = instances_.find(instance);
  if (it == instances_.end()) return false;
  Instance& in = it->second;
  // seq 1 opens a publisher's stream (with AllCleared): from there the messages are the
  // whole state, whatever came before (a restarted instance under the same id).
  if (seq == 1 || (in.synced && seq == in.last_seq + 1)) {
    if (seq == 1) in.blocks.clear();
    apply_events(in, events);
    in.synced = true;
    in.last_seq = seq;
    in.held.clear();
    return false;
  }
  const bool was_synced = in.synced;
  in.synced = false;
  in.held.push_back(Held{seq, events});
  if (in.held.size() > kMaxHeld) in.held.pop_front();
  return was_synced;
}

bool KvIndex::lose_sync(const std::string& instance) {
  const auto it = instances_.find(instance);
  if (it == instances_.end() || !it->second.synced) return false;
  it->second.synced = false;
  return true;
}

bool KvIndex::reset(const std::string& instance, const KvSnapshot& snapshot) {
  const auto it = instances_.find(instance);
  if (it == instances_.end()) return false;
  Instance& in = it->second;
  // A late answer to an old request: the stream has already brought the instance past it.
  if (in.synced && snapshot.seq <= in.last_seq) return true;
  in.blocks = std::unordered_set<uint64_t>(snapshot.hashes.begin(), snapshot.hashes.end());
  in.block_size = snapshot.block_size;
  in.last_seq = snapshot.seq;
  in.synced = true;
  for (const Held& h : in.held) {
    if (h.seq <= in.last_seq) continue;  // already in the snapshot
    if (h.seq != in.last_seq + 1) {
      in.synced = false;
      break;
    }
    apply_events(in, h.events);
    in.last_seq = h.seq;
  }
  // Either way none is needed again: a newer snapshot covers every message received so far.
  in.held.clear();
  return in.synced;
}

bool KvIndex::synced(const std::string& instance) const {
  const auto it = instances_.find(instance);
  return it != instances_.end() && it->second.synced;
}

std::vector<std::string> KvIndex::out_of_sync() const {
  std::vector<std::string> out;
  for (const auto& [name, in] : instances_) {
    if (!in.synced) out.push_back(name);
  }
  return out;
}

size_t KvIndex::n_blocks(const std::string& instance) const {
  const auto it = instances_.find(instance);
  return it == instances_.end() ? 0 : it->second.blocks.size();
}

int32_t KvIndex::block_size(const std::string& instance) const {
  const auto it = instances_.find(instance);
  return it == instances_.end() ? 0 : it->second.block_size;
}

size_t KvIndex::prefix_held(const Instance& in, std::span<const uint64_t> prompt_hashes) {
  size_t n = 0;
  while (n < prompt_hashes.size() && in.blocks.count(prompt_hashes[n])) ++n;
  return n;
}

size_t KvIndex::matched_blocks(const std::string& instance, std::span<const uint64_t> prompt_hashes) const {
  const auto it = instances_.find(instance);
  return it == instances_.end() ? 0 : prefix_held(it->second, prompt_hashes);
}

std::vector<KvIndex::Match> KvIndex::matches(std::span<const uint64_t> prompt_hashes) const {
  std::vector<Match> out;
  out.reserve(instances_.size());
  for (const auto& [name, in] : instances_) out.push_back(Match{name, prefix_held(in, prompt_hashes)});
  return out;
}

}  // namespace moe::kv_events
