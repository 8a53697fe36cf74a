#pragma once
// A model file written out as a Hugging Face checkpoint directory: config.json, tokenizer
// files and safetensors shards with an index, in BF16 or in FP8 (e4m3 with one scale per
// 128x128 block, as DeepSeek-V3 ships). gen-model uses it to make test checkpoints whose
// weights are those of a GGUF twin; it is the inverse of the tensor map the loader uses.
#include <cstdint>
#include <functional>
#include <string>

#include "model/gguf.h"
#include "model/safetensors.h"

namespace moe {

struct HfExportOptions {
  StDtype dtype = StDtype::BF16;  // BF16 or F8_E4M3 for the weight matrices
  int64_t fp8_block = 128;
  uint64_t max_shard_bytes = uint64_t(2) << 30;
};

// Norms, router weights and biases are written in F32, so a BF16 export holds exactly the
// values of a bf16 GGUF file. FP8 applies to every weight matrix but the embedding and the
// output head, as in DeepSeek-V3.
void export_hf_checkpoint(const GgufFile& f, const std::string& dir, const HfExportOptions& options,
                          const std::function<void(double)>& progress = {});

}  // namespace moe
