#pragma once
// config.json of a Hugging Face checkpoint (DeepseekV3ForCausalLM, DeepseekV2ForCausalLM,
// Qwen3MoeForCausalLM), read into the GGUF metadata llama.cpp's converter writes for the
// same model, so the rest of the engine sees one kind of model file. And back: the
// config.json of a model file, for writing checkpoints.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "model/gguf.h"
#include "model/model_config.h"

namespace moe {

struct HfModelConfig {
  std::string dir;
  std::string architecture;   // config.json "architectures"[0]
  GgufWriter metadata;        // <arch>.* and general.* keys (no tokenizer yet)
  ModelConfig config;         // the same, as the engine reads it (shapes for the tensor map)
  int64_t n_mtp_layers = 0;   // DeepSeek-V3 next-token-prediction layers after the last one
  bool tied_embeddings = false;
  bool score_bias = false;    // DeepSeek-V3 noaux_tc routing: e_score_correction_bias
  // quantization_config of an FP8 checkpoint: e4m3 weights, one scale per block of
  // fp8_block_rows x fp8_block_cols (0 when the checkpoint is not FP8).
  int64_t fp8_block_rows = 0;
  int64_t fp8_block_cols = 0;
};

// Reads DIR/config.json; every error names the file and the field.
HfModelConfig read_hf_config(const std::string& dir);

// config.json for a model file's metadata (the inverse of read_hf_config), with an FP8
// quantization_config when fp8_block > 0.
nlohmann::ordered_json hf_config_for(const GgufFile& f, int64_t fp8_block);

}  // namespace moe
