#pragma once
// Tensor element types with the numeric ids and block layouts GGUF files use, plus
// moengine's internal weight types (ids no GGUF writer uses; never read or written as GGUF).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace moe {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  BF16 = 30,
  // Internal: FP8 checkpoint weights served as they are. A block of 128 values is an f32
  // scale followed by 128 E4M3 codes (132 bytes); value = scale * e4m3(code).
  F8_E4M3_B128 = 1000,
  // Internal: q8_0, q4_K, q6_K and q5_0 rows regrouped 16 at a time at load for the AVX-512
  // kernels (see kernels/regrouped.h). Same sizes as the plain types; a matrix of them is
  // not an array of rows.
  Q8_0_R16 = 1001,
  Q4_K_R16 = 1002,
  Q6_K_R16 = 1003,
  Q5_0_R16 = 1004,
};

// The internal types' ids run from F8_E4M3_B128 to the last one above, without gaps.
inline constexpr uint32_t kFirstInternalType = uint32_t(GgmlType::F8_E4M3_B128);
inline constexpr uint32_t kInternalTypeCount = uint32_t(GgmlType::Q5_0_R16) - kFirstInternalType + 1;

struct GgmlTypeTraits {
  GgmlType type;
  std::string_view name;   // as llama.cpp prints it: "q4_K", "bf16", ...
  int64_t block_size;      // elements per block
  size_t block_bytes;      // bytes per block
  bool supported;          // moengine can compute with it (others are only recognised)
};

// Traits of a GGUF type id, or nullopt for an id no GGUF writer uses (the internal types
// included: the GGUF reader and writer validate ids with this).
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t id);
// Traits of any type, internal ones included.
const GgmlTypeTraits& traits(GgmlType type);

inline std::string_view type_name(GgmlType t) { return traits(t).name; }

// The regrouped form of a type (kernels/regrouped.h), or the type itself where it has none.
inline GgmlType regrouped_type(GgmlType plain) {
  switch (plain) {
    case GgmlType::Q8_0: return GgmlType::Q8_0_R16;
    case GgmlType::Q4_K: return GgmlType::Q4_K_R16;
    case GgmlType::Q6_K: return GgmlType::Q6_K_R16;
    case GgmlType::Q5_0: return GgmlType::Q5_0_R16;
    default: return plain;
  }
}

// The type a regrouped one came from, or t itself.
inline GgmlType plain_type(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0_R16: return GgmlType::Q8_0;
    case GgmlType::Q4_K_R16: return GgmlType::Q4_K;
    case GgmlType::Q6_K_R16: return GgmlType::Q6_K;
    case GgmlType::Q5_0_R16: return GgmlType::Q5_0;
    default: return t;
  }
}

inline bool is_regrouped(GgmlType t) { return plain_type(t) != t; }

// Bytes of a row of n elements; n must be a multiple of the block size.
inline size_t row_bytes(GgmlType t, int64_t n) {
  const auto& tr = traits(t);
  return size_t(n / tr.block_size) * tr.block_bytes;
}

// Parses "f32", "q8_0", "Q4_K", "fp8_e4m3", ... (case-insensitive) into a supported type,
// internal ones included: callers that write GGUF must refuse those.
std::optional<GgmlType> parse_type_name(std::string_view name);

}  // namespace moe
