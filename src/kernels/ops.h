#pragma once
// Element-wise and row kernels of the transformer: RMSNorm, RoPE (with YaRN), softmax,
// top-k, SwiGLU. Each has an optimized path and a `_ref` twin it is tested against.
#include <cstdint>
#include <vector>

namespace moe {

// y = x / sqrt(mean(x^2) + eps) * w  (w may be null: no scale). x and y may alias.
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);
void rms_norm_ref(const float* x, const float* w, float* y, int64_t n, float eps);

// out[i] = silu(gate[i]) * up[i]; out may alias gate or up.
void swiglu(const float* gate, const float* up, float* out, int64_t n);
void swiglu_ref(const float* gate, const float* up, float* out, int64_t n);

// In-place softmax over n values.
void softmax(float* x, int64_t n);
void softmax_ref(float* x, int64_t n);

// Indices of the k largest values, largest first; ties keep the lower index first.
void top_k(const float* x, int64_t n, int k, int32_t* out_idx);
void top_k_ref(const float* x, int64_t n, int k, int32_t* out_idx);

// Rotary embedding with the YaRN extension, following ggml's rope semantics so models
// converted for llama.cpp behave the same.
enum class RopeStyle {
  Interleaved,  // ggml "normal": rotates pairs (x[2i], x[2i+1]) (DeepSeek in GGUF)
  Neox,         // ggml "neox": rotates pairs (x[i], x[i + n_rot/2]) (Qwen)
};

struct RopeParams {
  int n_rot = 0;               // leading dims of each head that are rotated
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;     // 1 / scaling factor
  int n_ctx_orig = 0;          // original training context (YaRN)
  float ext_factor = 0.0f;     // YaRN mix; 0 disables the extrapolation ramp
  float attn_factor = 1.0f;    // magnitude scale applied to cos/sin
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  // ggml's optional rope_freqs tensor (f32 [n_rot/2], Llama-3 style): pair i's angle is
  // divided by freq_factors[i]. Null: all 1. Not owned; read only while building a table.
  const float* freq_factors = nullptr;
};

// cos/sin for positions, computed once per step and shared by all heads and layers:
// for each position, n_rot/2 (cos, sin) pairs.
class RopeTable {
 public:
  void build(const RopeParams& p, const int32_t* positions, int64_t n_positions);
  const float* cos_sin(int64_t i) const { return table_.data() + i * int64_t(pairs_) * 2; }
  int pairs() const { return pairs_; }

 private:
  int pairs_ = 0;
  std::vector<float> table_;
};
void rope_table_ref(const RopeParams& p, int32_t position, float* cos_sin_out);

// Rotates the first n_rot dims of n_heads heads (head_stride floats apart) of one token.
void apply_rope(float* x, int64_t n_heads, int64_t head_stride, const float* cos_sin, int n_rot,
                RopeStyle style);
void apply_rope_ref(float* x, int64_t n_heads, int64_t head_stride, const float* cos_sin, int n_rot,
                    RopeStyle style);

// ggml_rope_yarn_corr_dims: the first and last rotary pair index of YaRN's ramp between
// extrapolated and interpolated angles (floor/ceil of the solved dims, clamped to
// [0, n_rot - 1]).
void rope_yarn_corr_dims(const RopeParams& p, float dims[2]);

// Name of the implementation chosen on this CPU for the functions above (for logs and
// benchmarks): "avx2" or "generic".
const char* ops_backend_name();

}  // namespace moe
