#pragma once
// Deterministic random-weight models, written as GGUF files that follow llama.cpp's
// conventions exactly (metadata keys, tensor names and shapes), so they exercise the same
// loading and compute paths as real DeepSeek and Qwen3-MoE files.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/hf_export.h"
#include "kernels/ggml_type.h"
#include "model/model_config.h"
#include "tokenizer/gguf_vocab.h"

namespace moe {

struct GenSpec {
  Arch arch = Arch::Deepseek2;
  std::string name;
  int64_t n_vocab = 512;
  int64_t n_embd = 256;
  int64_t n_layer = 3;
  int64_t n_head = 4;
  int64_t n_ctx = 4096;
  // deepseek2
  int64_t q_lora_rank = 64;       // 0: attn_q directly (V2-Lite)
  int64_t kv_lora_rank = 64;
  int64_t qk_nope_dim = 32;
  int64_t qk_rope_dim = 32;
  int64_t v_head_dim = 32;
  int64_t n_dense_lead = 1;
  int64_t n_ff_dense = 512;
  int64_t n_shared_experts = 1;
  bool mla_split = true;          // attn_k_b/attn_v_b (newer files) or attn_kv_b (older)
  bool v3_gating = true;          // sigmoid + exp_probs_b + groups, else V2 softmax
  float yarn_factor = 0.0f;       // > 1 writes YaRN rope scaling
  // qwen3moe
  int64_t n_head_kv = 2;
  int64_t head_dim = 64;
  // MoE
  int64_t n_experts = 8;
  int64_t n_used = 2;
  int64_t n_ff_expert = 128;
  int64_t n_group = 4;
  int64_t topk_group = 2;
  float routed_scale = 2.5f;
  // Skewed routing (gen/router_skew.h); the defaults leave routing as even as random
  // weights make it, and the file as without these fields.
  // deepseek2: DeepSeek's MTP layers after the decoder layers (0 or 1), as llama.cpp
  // stores them (blk.N.nextn.*).
  int64_t n_nextn = 0;
  float expert_skew = 0.0f;         // Zipf exponent of each MoE layer's expert popularity
  int64_t skew_token_groups = 0;    // >= 2: experts follow the vocabulary range of the token

  // Storage type of the weight matrices: a single type, or the "q4_K_M" mix.
  GgmlType type = GgmlType::F32;
  bool q4_k_m = false;
  uint64_t seed = 42;
  // A real vocabulary (e.g. from tokenizer.json) to embed instead of the synthetic one;
  // n_vocab must then be its size.
  std::shared_ptr<const GgufVocab> vocab;
};

// Presets: "tiny" (tests), "mid" (DeepSeek-V2-Lite-like, about 2.6B total / 0.5B active
// parameters, for benchmarks), for either architecture.
GenSpec gen_preset(Arch arch, const std::string& preset);
std::vector<std::string> gen_preset_names();

// Storage type chosen for one tensor given the requested type (norms and the router stay
// f32; a type whose block does not divide the row falls back like llama-quantize does).
GgmlType gen_tensor_type(const GenSpec& spec, const std::string& name, int64_t ne0);

// Writes the model; progress(done_bytes, total_bytes).
void write_generated_model(const GenSpec& spec, const std::string& path,
                           const std::function<void(uint64_t, uint64_t)>& progress = {});

// The same model as a Hugging Face checkpoint directory (BF16, or FP8 with block scales):
// the weights of its bf16 GGUF twin (write_generated_model with type bf16), so the two
// load to the same tensors.
void write_generated_hf(const GenSpec& spec, const std::string& dir, const HfExportOptions& options,
                        const std::function<void(double)>& progress = {});

int64_t gen_parameter_count(const GenSpec& spec, bool active_only);

}  // namespace moe
