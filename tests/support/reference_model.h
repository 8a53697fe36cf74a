#pragma once
// The plain f32 reference forward pass: an independent reading of docs/architectures.md
// (deepseek2 with MLA in its non-absorbed form, qwen3moe), written for clarity, not speed.
// Every weight is dequantized to f32 at load; forward() recomputes the whole sequence
// causally from position 0 with straight loops and double accumulators. Tests compare the
// optimized engine against it on tiny models.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moe {
class GgufFile;
}

namespace moe::testing {

class ReferenceModel {
 public:
  // Reads the hyper-parameters and dequantizes every weight; throws moe::Error naming the
  // file and the key or tensor when something is missing or has the wrong shape.
  explicit ReferenceModel(const GgufFile& file);
  ~ReferenceModel();
  ReferenceModel(ReferenceModel&&) noexcept;
  ReferenceModel& operator=(ReferenceModel&&) noexcept;

  // Logits f32 [tokens.size(), n_vocab] (row t = the logits after token t), positions
  // 0..tokens.size()-1. Token ids outside [0, n_vocab) throw.
  std::vector<float> forward(const std::vector<int32_t>& tokens) const;

  int64_t n_vocab() const;
  int64_t n_embd() const;
  int64_t n_layer() const;
  const std::string& architecture() const;
  // The attention logit scale (kq_scale) and the magnitude factor the RoPE is applied
  // with (llama.cpp's attn_factor as passed to ggml_rope_ext, times ggml's own YaRN factor),
  // as derived from the metadata. Exposed for tests of the YaRN constants.
  double kq_scale() const;
  double rope_magnitude() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace moe::testing
