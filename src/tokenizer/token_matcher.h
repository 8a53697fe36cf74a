#pragma once
// Finds added tokens (special tokens such as <|im_start|>, and user-defined ones) in text
// before BPE sees it. Matching is leftmost-longest, as in Hugging Face tokenizers: the
// earliest position where any token starts wins, and there the longest token.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace moe {

class TokenMatcher {
 public:
  void add(std::string_view text, int32_t id);
  bool empty() const { return nodes_.size() <= 1; }

  struct Match {
    size_t begin = 0, end = 0;
    int32_t id = -1;
  };
  // The leftmost-longest match at or after `start`, if any.
  bool find(std::string_view s, size_t start, Match& m) const;

 private:
  // A byte trie: node 0 is the root; edges live in one hash map keyed by (node, byte).
  struct Node {
    int32_t id = -1;  // token ending here
  };
  static uint64_t edge_key(uint32_t node, uint8_t byte) { return (uint64_t(node) << 8) | byte; }
  std::vector<Node> nodes_{Node{}};
  std::unordered_map<uint64_t, uint32_t> edges_;
  std::array<bool, 256> first_byte_{};  // cheap filter: most positions start no token
};

}  // namespace moe
