#pragma once
// The simulator's view of a model file moengine loads (a GGUF file or a Hugging Face
// checkpoint directory), from its metadata alone: its shape, and the number formats the
// engine serves it in. Shared by `moengine sim` and `moengine sim calibrate`.
#include <string>

#include "sim/profiles.h"

namespace moe::cli {

// kind: "gguf" or "checkpoint" (the keys of a sim config's `model:`).
sim::ModelShape read_model_file(const std::string& kind, const std::string& path);

// What the engine computes a model file in:
// - weights: the format of most of the weight matrices' elements (a q4_K_M file is q4_k;
//   FP8 checkpoints are served as q8_0, BF16/F16/F32 ones as stored);
// - activations: q8_0 for quantized weights (the kernels pack activations into 8-bit
//   blocks: the int8 compute type), f32 for float weights;
// - kv_cache: f32, what the engine's KvStore holds.
sim::Precision read_model_precision(const std::string& kind, const std::string& path);

}  // namespace moe::cli
