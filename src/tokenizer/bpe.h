#pragma once
// Byte-level BPE over token ids. A word's bytes start as the 256 byte tokens; the adjacent
// pair with the lowest merge rank is merged until no pair has a rank, leftmost first on
// ties: the procedure of GPT-2 and of Hugging Face tokenizers, so ids come out identical.
#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace moe {

class BpeModel {
 public:
  // tokens: byte-level spelling by id ("" for ids without a token); merges: by rank, in
  // byte-level spelling. Throws moe::Error when a merge names a token the vocabulary lacks.
  // ignore_merges: a word that is itself a token is taken whole (Llama-3 style files).
  BpeModel(const std::vector<std::string>& tokens, const std::vector<std::pair<std::string, std::string>>& merges,
           bool ignore_merges);

  // Appends the ids of one pre-tokenized word (raw bytes).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

 private:
  struct Merge {
    int32_t rank = -1;
    int32_t merged = -1;
  };
  // Open-addressing table from a (left, right) id pair to its merge: the inner loop of BPE
  // is this lookup, and a flat table is several times faster than std::unordered_map.
  class PairTable {
   public:
    void reserve(size_t n);
    void insert(int32_t left, int32_t right, Merge m);
    Merge find(int32_t left, int32_t right) const;

   private:
    struct Slot {
      uint64_t key = kEmpty;
      Merge merge;
    };
    static constexpr uint64_t kEmpty = ~uint64_t(0);
    size_t slot_of(uint64_t key) const { return size_t((key * 0x9e3779b97f4a7c15ull) >> shift_); }
    std::vector<Slot> slots_;
    int shift_ = 64;
    size_t mask_ = 0;
  };

  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  std::array<int32_t, 256> byte_token_{};
  PairTable pairs_;
  bool ignore_merges_ = false;
  std::unordered_map<std::string, int32_t> whole_tokens_;  // raw bytes -> id, for ignore_merges

  // Words repeat a lot in real text; their ids are kept, up to a bound, for every thread.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace moe
