#pragma once
// Opens a model as users hold it: a GGUF file, or a Hugging Face checkpoint directory
// (config.json, tokenizer.json + tokenizer_config.json, *.safetensors with or without
// model.safetensors.index.json). Either way the engine gets one model file: a directory is
// assembled in memory into the tensors and metadata a GGUF conversion would hold.
#include <functional>
#include <memory>
#include <string>

#include "checkpoint/hf_config.h"
#include "checkpoint/hf_tensors.h"
#include "checkpoint/weight_format.h"
#include "model/gguf.h"
#include "model/model.h"
#include "model/safetensors.h"

namespace moe {

bool is_hf_checkpoint(const std::string& path);

// An opened Hugging Face checkpoint: its config, shards and tensor plan.
struct HfCheckpoint {
  HfModelConfig model;
  SafetensorsSet shards;
  HfPlan plan;
};
std::unique_ptr<HfCheckpoint> open_hf_checkpoint(const std::string& dir);

// The GGUF metadata of a checkpoint: config.json's, and the tokenizer from tokenizer.json
// and tokenizer_config.json (without them the model runs on token ids only).
GgufWriter hf_metadata(const HfCheckpoint& ck);

// progress(fraction) while tensors are converted. `format` applies to checkpoint
// directories only: a GGUF file's types are its own.
std::unique_ptr<GgufFile> open_model_file(const std::string& path, const WeightFormat& format,
                                          const std::function<void(double)>& progress = {});

// read_routed_experts as for Model::load.
std::unique_ptr<Model> load_model(const std::string& path, const WeightFormat& format,
                                  const std::function<void(double)>& progress = {}, bool read_routed_experts = true);

}  // namespace moe
