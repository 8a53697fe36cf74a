#include "core/block_hash.h"

#include <xxhash.h>

namespace moe {

uint64_t block_hash(uint64_t parent, const int32_t* tokens, size_t block_size) {
  return XXH3_64bits_withSeed(tokens, block_size * sizeof(int32_t), parent);
}

std::vector<uint64_t> prompt_block_hashes(std::span<const int32_t> tokens, size_t block_size) {
  std::vector<uint64_t> hashes;
  if (block_size == 0) return hashes;
  hashes.reserve(tokens.size() / block_size);
  uint64_t parent = kRootParentHash;
  for (size_t at = 0; at + block_size <= tokens.size(); at += block_size) {
    parent = block_hash(parent, tokens.data() + at, block_size);
    hashes.push_back(parent);
  }
  return hashes;
}

}  // namespace moe
