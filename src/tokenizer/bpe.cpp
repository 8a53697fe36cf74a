#include "tokenizer/bpe.h"

#include <algorithm>
#include <bit>
#include <queue>

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace moe {
namespace {

constexpr size_t kCacheEntries = 1 << 16;
constexpr size_t kCacheWordBytes = 64;

uint64_t pair_key(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }

}  // namespace

void BpeModel::PairTable::reserve(size_t n) {
  const size_t cap = std::bit_ceil(std::max<size_t>(16, n * 2));
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  shift_ = 64 - std::countr_zero(cap);
}

void BpeModel::PairTable::insert(int32_t left, int32_t right, Merge m) {
  const uint64_t key = pair_key(left, right);
  for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
    if (slots_[i].key == key) return;  // a repeated merge keeps its first (lowest) rank
    if (slots_[i].key == kEmpty) {
      slots_[i] = {key, m};
      return;
    }
  }
}

BpeModel::Merge BpeModel::PairTable::find(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
    if (slots_[i].key == key) return slots_[i].merge;
    if (slots_[i].key == kEmpty) return {};
  }
}

BpeModel::BpeModel(const std::vector<std::string>& tokens,
                   const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges)
    : ignore_merges_(ignore_merges) {
  std::unordered_map<std::string_view, int32_t> ids;
  ids.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i)
    if (!tokens[i].empty()) ids.emplace(tokens[i], int32_t(i));
  for (int b = 0; b < 256; ++b) {
    const std::string spelled = bytes_to_byte_level(std::string(1, char(b)));
    auto it = ids.find(spelled);
    if (it == ids.end()) fail("not a byte-level BPE vocabulary: it has no token for byte 0x{:02x} ('{}')", b, spelled);
    byte_token_[size_t(b)] = it->second;
  }
  pairs_.reserve(merges.size());
  std::string joined;
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [l, rt] = merges[r];
    auto li = ids.find(l), ri = ids.find(rt);
    joined = l + rt;
    auto mi = ids.find(joined);
    if (li == ids.end() || ri == ids.end() || mi == ids.end())
      fail("BPE merge {} ('{} {}') uses a token that is not in the vocabulary", r, l, rt);
    pairs_.insert(li->second, ri->second, {int32_t(r), mi->second});
  }
  if (ignore_merges_) {
    for (size_t i = 0; i < tokens.size(); ++i)
      if (auto raw = byte_level_to_bytes(tokens[i]); raw && !raw->empty()) whole_tokens_.emplace(*raw, int32_t(i));
  }
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (word.size() == 1) {
    out.push_back(byte_token_[uint8_t(word[0])]);
    return;
  }
  if (ignore_merges_) {
    if (auto it = whole_tokens_.find(std::string(word)); it != whole_tokens_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() > kCacheWordBytes) {
    merge_word(word, out);
    return;
  }
  std::string key(word);
  {
    std::lock_guard lock(cache_mutex_);
    if (auto it = cache_.find(key); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  merge_word(word, out);
  std::lock_guard lock(cache_mutex_);
  if (cache_.size() >= kCacheEntries) cache_.clear();
  cache_.emplace(std::move(key), std::vector<int32_t>(out.begin() + std::ptrdiff_t(first), out.end()));
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id, prev, next;
  };
  struct Candidate {
    int32_t rank, pos, left, right, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const int32_t n = int32_t(word.size());
  std::vector<Symbol> sym(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) sym[size_t(i)] = {byte_token_[uint8_t(word[size_t(i)])], i - 1, i + 1 < n ? i + 1 : -1};

  std::vector<Candidate> storage;
  storage.reserve(size_t(n));
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap(std::greater<>{}, std::move(storage));
  auto consider = [&](int32_t pos) {
    const int32_t next = sym[size_t(pos)].next;
    if (next < 0) return;
    const Merge m = pairs_.find(sym[size_t(pos)].id, sym[size_t(next)].id);
    if (m.rank >= 0) heap.push({m.rank, pos, sym[size_t(pos)].id, sym[size_t(next)].id, m.merged});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);

  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& s = sym[size_t(c.pos)];
    // Entries go stale when a neighbour merges first; the ids tell whether this pair still exists.
    if (s.id != c.left || s.next < 0 || sym[size_t(s.next)].id != c.right) continue;
    Symbol& right = sym[size_t(s.next)];
    right.id = -1;
    s.id = c.merged;
    s.next = right.next;
    if (s.next >= 0) sym[size_t(s.next)].prev = c.pos;
    if (s.prev >= 0) consider(s.prev);
    consider(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = sym[size_t(i)].next) out.push_back(sym[size_t(i)].id);
}

}  // namespace moe
