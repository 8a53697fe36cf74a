#pragma once
// Block (de)quantization in exactly the layouts GGUF files use (ggml's block_q8_0,
// block_q4_K, ...). These are the reference conversions: plain C++, used by gen-model to
// write files and by the tests as ground truth for every optimized kernel.
#include <cstdint>

#include "kernels/ggml_type.h"

namespace moe {

// n must be a multiple of the type's block size; dst holds row_bytes(t, n) bytes.
void quantize_row(GgmlType t, const float* src, void* dst, int64_t n);
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

}  // namespace moe
