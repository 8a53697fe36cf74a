#pragma once
// Prefix-cache block hashes. The engines name the full KV blocks of their prefix index by
// them, and the proxy hashes a prompt's blocks the same way to ask which instance holds
// them, so both call these functions and nothing else computes the chain.
//
// Block i of a sequence (token ids [i*bs, (i+1)*bs)) is named by
//   h_i = XXH3_64(its bs token ids as int32 in host byte order, seed = h_{i-1}),
//   h_{-1} = kRootParentHash = 0,
// so h_i depends on every token up to the end of block i: two sequences share h_i exactly
// when their first (i+1)*bs tokens are equal (up to a 64-bit collision). Only hosts of one
// byte order share hashes; every host moengine builds for is little-endian.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace moe {

// The parent of a sequence's first block.
inline constexpr uint64_t kRootParentHash = 0;

// The hash of one full block of block_size tokens whose predecessor's hash is parent.
uint64_t block_hash(uint64_t parent, const int32_t* tokens, size_t block_size);

// h_0, h_1, ... of the full blocks of tokens (a trailing partial block has no hash).
std::vector<uint64_t> prompt_block_hashes(std::span<const int32_t> tokens, size_t block_size);

}  // namespace moe
