#pragma once
// Which Hugging Face tensors make each tensor of the engine's model file (GGUF names and
// shapes, as llama.cpp's converter writes them): routed experts stacked, MLA's kv_b_proj
// split into the per-head W_kb (transposed) and W_vb of the absorbed form, the FP8 block
// scales that go with e4m3 weights. The plan is checked against the checkpoint before any
// byte is read: every error names the shard file and the tensor.
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/hf_config.h"
#include "model/safetensors.h"

namespace moe {

// How the rows of a planned tensor come from its sources.
enum class HfLayout {
  Direct,       // one source, same rows (a 1-D source is one row)
  ExpertStack,  // one source per expert, stacked along the last GGUF dimension
  KvbKeys,      // kv_b_proj's key rows of each head, transposed: [n_head][kv_lora][nope]
  KvbValues,    // kv_b_proj's value rows of each head: [n_head][v][kv_lora]
};

// What the tensor is for decides the types it may be stored in.
enum class HfRole { Matrix, Norm, Router, Bias };

// One tensor of the engine's model file and the Hugging Face tensors it is made of.
struct HfMapEntry {
  std::string name;                    // GGUF name
  std::vector<int64_t> ne;             // GGUF order
  HfLayout layout = HfLayout::Direct;
  HfRole role = HfRole::Matrix;
  std::vector<std::string> hf_names;   // one, or one per expert
  std::vector<int64_t> hf_shape;       // of each Hugging Face tensor, row-major
  bool optional = false;               // may be absent from a checkpoint (then left out)
};

// The map for a model's config (llama.cpp's converter's names, the other way round).
std::vector<HfMapEntry> hf_tensor_map(const ModelConfig& c, bool tied_embeddings, bool score_bias);

struct HfSource {
  std::string name;                  // Hugging Face tensor name
  const StTensor* tensor = nullptr;  // 2-D [rows, cols] or 1-D
  const StTensor* scale = nullptr;   // FP8: f32 [ceil(rows / block_rows), ceil(cols / block_cols)]
};

struct HfPlannedTensor {
  std::string name;          // GGUF name
  std::vector<int64_t> ne;   // GGUF order (ne[0] contiguous)
  HfLayout layout = HfLayout::Direct;
  HfRole role = HfRole::Matrix;
  std::vector<HfSource> sources;
  StDtype dtype() const { return sources.front().tensor->dtype; }
  int64_t n_rows() const;    // product of ne[1..]
};

struct HfPlan {
  std::vector<HfPlannedTensor> tensors;
  std::vector<std::string> skipped;  // checkpoint tensors the engine does not use (MTP layers not read)
  int64_t fp8_block_rows = 0, fp8_block_cols = 0;
  int64_t kv_nope = 0, kv_v = 0, kv_lora = 0;  // kv_b_proj's split (deepseek2)
};

// Maps every tensor, the MTP layer's when m.config.n_nextn says it is read; a tensor
// missing, of the wrong shape or dtype, or left over unused (other than MTP layers not
// read, which are skipped with a note) is an error.
HfPlan plan_hf_tensors(const HfModelConfig& m, const SafetensorsSet& st);

// Row r (over ne[1..]) of a Direct / ExpertStack / KvbValues tensor: the source and its row.
struct HfRowRef {
  const HfSource* source;
  int64_t row;
};
HfRowRef hf_row_source(const HfPlan& plan, const HfPlannedTensor& t, int64_t r);

// Decodes `n` values from column `col0` of row `row` of a source into f32 (FP8 with its
// block scales applied).
void hf_decode_row(const HfPlan& plan, const HfSource& s, int64_t row, int64_t col0, int64_t n, float* out);

}  // namespace moe
