#include "tokenizer/token_matcher.h"

namespace moe {

void TokenMatcher::add(std::string_view text, int32_t id) {
  if (text.empty()) return;
  uint32_t node = 0;
  for (unsigned char c : text) {
    auto [it, inserted] = edges_.try_emplace(edge_key(node, c), uint32_t(nodes_.size()));
    if (inserted) nodes_.emplace_back();
    node = it->second;
  }
  nodes_[node].id = id;
  first_byte_[uint8_t(text[0])] = true;
}

bool TokenMatcher::find(std::string_view s, size_t start, Match& m) const {
  if (empty()) return false;
  for (size_t i = start; i < s.size(); ++i) {
    if (!first_byte_[uint8_t(s[i])]) continue;
    uint32_t node = 0;
    int32_t best = -1;
    size_t best_end = 0;
    for (size_t j = i; j < s.size(); ++j) {
      auto it = edges_.find(edge_key(node, uint8_t(s[j])));
      if (it == edges_.end()) break;
      node = it->second;
      if (nodes_[node].id >= 0) {
        best = nodes_[node].id;
        best_end = j + 1;
      }
    }
    if (best >= 0) {
      m = {i, best_end, best};
      return true;
    }
  }
  return false;
}

}  // namespace moe
