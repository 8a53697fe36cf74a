// Qwen3-MoE ("qwen3moe" in GGUF): grouped-query attention with a per-head RMSNorm on
// queries and keys before NeoX-style RoPE; every layer is MoE (softmax top-k, weights
// renormalised), no shared experts. KV cache rows are [keys of all KV heads | values].
#include <algorithm>

#include "core/thread_pool.h"
#include "model/transformer.h"
#include "model/weight_regroup.h"

namespace moe {
namespace {

struct GqaLayer {
  QMatrix wq;                      // [n_head * head_dim, n_embd]
  QMatrix wk;                      // [n_head_kv * head_dim, n_embd]
  QMatrix wv;                      // [n_head_kv * head_dim, n_embd]
  const float* q_norm = nullptr;   // f32 [head_dim]
  const float* k_norm = nullptr;   // f32 [head_dim]
  QMatrix wo;                      // [n_embd, n_head * head_dim]
};

class Qwen3Moe final : public Transformer {
 public:
  Qwen3Moe(std::unique_ptr<GgufFile> file, ModelConfig config) : Transformer(std::move(file), std::move(config)) {
    const TensorTable t(*file_);
    const ModelConfig& c = config_;
    const int64_t q_dim = c.n_head * c.head_dim, kv_dim = c.n_head_kv * c.head_dim;
    for (int64_t l = 0; l < c.n_layer; ++l) {
      GqaLayer g;
      g.wq = t.require(layer_tensor(l, "attn_q.weight"), {c.n_embd, q_dim}).matrix();
      g.wk = t.require(layer_tensor(l, "attn_k.weight"), {c.n_embd, kv_dim}).matrix();
      g.wv = t.require(layer_tensor(l, "attn_v.weight"), {c.n_embd, kv_dim}).matrix();
      g.q_norm = t.require(layer_tensor(l, "attn_q_norm.weight"), {c.head_dim}).f32();
      g.k_norm = t.require(layer_tensor(l, "attn_k_norm.weight"), {c.head_dim}).f32();
      g.wo = t.require(layer_tensor(l, "attn_output.weight"), {q_dim, c.n_embd}).matrix();
      layers_.push_back(g);
    }
    finish_load(t);
  }

 private:
  void mark_attention_for_regrouping(WeightRegrouper& r) override {
    for (GqaLayer& g : layers_) {
      for (QMatrix* w : {&g.wq, &g.wk, &g.wv, &g.wo}) r.add(*w);
    }
  }

  std::vector<QMatrix> attention_matrices(int64_t l) const override {
    const GqaLayer& g = layers_[size_t(l)];
    return {g.wq, g.wk, g.wv, g.wo};
  }

  void attention(int64_t l, const Step& step, const float* h, float* x, KvStore& kv, ThreadPool& pool) override {
    const ModelConfig& c = config_;
    const GqaLayer& g = layers_[size_t(l)];
    const int64_t T = int64_t(step.tokens.size());
    const int64_t hd = c.head_dim, q_dim = c.n_head * hd, kv_dim = c.n_head_kv * hd;
    const int64_t ld = q_dim + 2 * kv_dim;
    qkv_.resize(size_t(T * ld));
    projs_ = {{g.wq, h, c.n_embd, qkv_.data(), ld},
              {g.wk, h, c.n_embd, qkv_.data() + q_dim, ld},
              {g.wv, h, c.n_embd, qkv_.data() + q_dim + kv_dim, ld}};
    projector().run(projs_, T, pool);

    int64_t t = 0;
    for (const SeqSlice& s : step.seqs) {
      for (int64_t i = 0; i < s.n_tokens; ++i, ++t) {
        float* q = qkv_.data() + t * ld;
        float* k = q + q_dim;
        for (int64_t head = 0; head < c.n_head; ++head) rms_norm(q + head * hd, g.q_norm, q + head * hd, hd, c.rms_eps);
        for (int64_t head = 0; head < c.n_head_kv; ++head) rms_norm(k + head * hd, g.k_norm, k + head * hd, hd, c.rms_eps);
        apply_rope(q, c.n_head, hd, rope().cos_sin(t), c.rope.n_rot, c.rope_style);
        apply_rope(k, c.n_head_kv, hd, rope().cos_sin(t), c.rope.n_rot, c.rope_style);
        kv.write_row(l, *s.block_table, s.pos0 + i, k);
      }
    }

    AttentionShape shape;
    shape.n_q_heads = int(c.n_head);
    shape.n_kv_heads = int(c.n_head_kv);
    shape.dk = hd;
    shape.dv = hd;
    shape.k_offset = 0;
    shape.k_head_stride = hd;
    shape.v_offset = kv_dim;
    shape.v_head_stride = hd;
    shape.scale = c.kq_scale;
    attn_.resize(size_t(T * q_dim));
    attend_slices(l, step, shape, qkv_.data(), ld, attn_.data(), q_dim, kv, pool);
    attn_out_.resize(size_t(T * c.n_embd));
    projector().run(g.wo, attn_.data(), q_dim, attn_out_.data(), c.n_embd, T, pool);
    for (int64_t i = 0; i < T * c.n_embd; ++i) x[i] += attn_out_[size_t(i)];
  }

  std::vector<GqaLayer> layers_;
  std::vector<Projection> projs_;
  std::vector<float> qkv_, attn_, attn_out_;
};

}  // namespace

std::unique_ptr<Model> make_qwen3_moe(std::unique_ptr<GgufFile> file, ModelConfig config) {
  return std::make_unique<Qwen3Moe>(std::move(file), std::move(config));
}

}  // namespace moe
