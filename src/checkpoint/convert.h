#pragma once
// moengine convert: a Hugging Face checkpoint directory to a GGUF file that llama.cpp also
// loads (its converter's metadata keys, tensor names and layouts), with the weight
// matrices in one type. Streams tensor by tensor, so memory stays at the largest tensor.
#include <cstdint>
#include <functional>
#include <string>

#include "checkpoint/weight_format.h"

namespace moe {

// format: a type for every matrix, or auto (BF16/F16/F32 kept, FP8 to q8_0); fp8 has no
// GGUF type and is refused. progress(done_bytes, total_bytes).
void convert_hf_to_gguf(const std::string& dir, const std::string& out, const WeightFormat& format,
                        const std::function<void(uint64_t, uint64_t)>& progress = {});

}  // namespace moe
