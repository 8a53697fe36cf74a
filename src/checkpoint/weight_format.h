#pragma once
// The types a checkpoint's weight matrices are stored in once loaded or converted.
// Norms, router weights and biases are always f32 (as llama.cpp's converter keeps them).
#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/ggml_type.h"

namespace moe {

struct WeightFormat {
  enum Mode {
    Auto,  // keep BF16 / F16 / F32 as stored; FP8 re-quantized to q8_0 (faster here, see docs)
    Fp8,   // FP8 weights served as they are (fp8_e4m3 blocks, dequantized on the fly)
    Type,  // every weight matrix re-quantized to `type`
  } mode = Auto;
  GgmlType type = GgmlType::Q8_0;
};

// "auto", "fp8", or a type name (q8_0, q4_K, bf16, f16, f32, ...); throws moe::Error.
WeightFormat parse_weight_format(std::string_view text);
std::string weight_format_name(const WeightFormat& f);

// A type whose block divides a row of ne0 values: k-quants fall back to a 32-wide type
// (q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0) and that to f16, as llama-quantize does.
GgmlType storable_type(GgmlType t, int64_t ne0);

}  // namespace moe
