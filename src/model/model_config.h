#pragma once
// Hyper-parameters of a model, read from GGUF metadata (`<arch>.*` keys as llama.cpp's
// converter writes them) and checked for consistency before any tensor is touched.
#include <cstdint>
#include <string>

#include "kernels/kv_format.h"
#include "kernels/ops.h"
#include "moe/gating.h"

namespace moe {

class GgufFile;

enum class Arch { Deepseek2, Qwen3Moe };

struct ModelConfig {
  Arch arch = Arch::Deepseek2;
  std::string arch_name;      // general.architecture
  std::string name;           // general.name (may be empty)
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;        // the decoder layers a token runs through
  // DeepSeek's multi-token-prediction ("NextN") layers, numbered after the decoder layers
  // (block_count counts both; nextn_predict_layers says how many are MTP).
  int64_t n_nextn = 0;
  int64_t n_ctx_train = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;      // qwen3moe GQA heads
  int64_t head_dim = 0;       // qwen3moe per-head q/k/v dims
  float rms_eps = 1e-6f;

  // deepseek2 (MLA)
  int64_t q_lora_rank = 0;    // 0: queries projected directly (V2-Lite)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_dim = 0;
  int64_t qk_rope_dim = 0;
  int64_t v_head_dim = 0;
  int64_t n_dense_lead = 0;   // leading layers with a dense FFN
  int64_t n_ff_dense = 0;
  int64_t n_shared_experts = 0;
  float kq_scale = 0.0f;      // attention logit scale (YaRN mscale folded in)

  // MoE
  int64_t n_ff_expert = 0;
  GatingConfig gating;

  RopeParams rope;
  RopeStyle rope_style = RopeStyle::Interleaved;

  // Special tokens from the tokenizer metadata (-1 when absent).
  int32_t bos_id = -1;
  int32_t eos_id = -1;

  bool is_moe_layer(int64_t layer) const { return layer >= n_dense_lead; }
  // The layers whose routed experts an expert-parallel group spreads: the decoder's MoE
  // layers, then the MTP layer's (ExpertMap layer n, for layer n of them in this order).
  int64_t n_moe_layers() const {
    int64_t n = 0;
    for (int64_t l = 0; l < n_layer + n_nextn; ++l) n += is_moe_layer(l) ? 1 : 0;
    return n;
  }
  // Floats per position and layer in the KV cache.
  int64_t kv_row_floats() const;
  // How such a row is stored in `dtype`: its segments are MLA's latent and rope key, or each
  // kv head's key then each kv head's value.
  KvRowFormat kv_row_format(KvDtype dtype) const;

  static ModelConfig from_gguf(const GgufFile& file);
  std::string summary() const;
};

}  // namespace moe
