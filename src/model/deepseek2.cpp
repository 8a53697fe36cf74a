// DeepSeek-V2 / V2-Lite / V3 / R1 ("deepseek2" in GGUF): multi-head latent attention run
// in its absorbed form. The KV cache holds one row per position, the normalised latent
// (kv_lora_rank) followed by the rotated shared rope key (qk_rope_dim); queries are
// mapped into the latent space per head (W_kb^T q_nope), attention runs as MQA over the
// latent rows, and its latent output is mapped back per head by W_vb.
#include <algorithm>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/quant.h"
#include "model/transformer.h"
#include "model/weight_regroup.h"

namespace moe {
namespace {

struct MlaLayer {
  QMatrix wq_a;                     // [q_lora, n_embd] (absent without q_lora)
  const float* q_a_norm = nullptr;  // f32 [q_lora]
  QMatrix wq;                       // [n_head * (nope + rope), q_lora or n_embd]
  QMatrix wkv_a;                    // [kv_lora + rope, n_embd]
  const float* kv_a_norm = nullptr; // f32 [kv_lora]
  std::vector<QMatrix> k_b;         // per head [kv_lora, nope]: latent query = k_b q_nope
  std::vector<QMatrix> v_b;         // per head [v, kv_lora]: value = v_b latent output
  QMatrix wo;                       // [n_embd, n_head * v]
  std::vector<float> k_b_owned;     // k_b transposed out of a legacy attn_kv_b
};

class Deepseek2 final : public Transformer {
 public:
  Deepseek2(std::unique_ptr<GgufFile> file, ModelConfig config) : Transformer(std::move(file), std::move(config)) {
    const TensorTable t(*file_);
    for (int64_t l = 0; l < config_.n_layer + config_.n_nextn; ++l) layers_.push_back(load_layer(t, l));
    finish_load(t);
  }

 private:
  MlaLayer load_layer(const TensorTable& t, int64_t l) {
    const ModelConfig& c = config_;
    const int64_t qk = c.qk_nope_dim + c.qk_rope_dim;
    MlaLayer m;
    if (t.has(layer_tensor(l, "attn_q_a.weight"))) {
      if (c.q_lora_rank <= 0) fail("{}: layer {} has attn_q_a but attention.q_lora_rank is not set", file_->path(), l);
      m.wq_a = t.require(layer_tensor(l, "attn_q_a.weight"), {c.n_embd, c.q_lora_rank}).matrix();
      m.q_a_norm = t.require(layer_tensor(l, "attn_q_a_norm.weight"), {c.q_lora_rank}).f32();
      m.wq = t.require(layer_tensor(l, "attn_q_b.weight"), {c.q_lora_rank, c.n_head * qk}).matrix();
    } else {
      m.wq = t.require(layer_tensor(l, "attn_q.weight"), {c.n_embd, c.n_head * qk}).matrix();
    }
    m.wkv_a = t.require(layer_tensor(l, "attn_kv_a_mqa.weight"), {c.n_embd, c.kv_lora_rank + c.qk_rope_dim}).matrix();
    m.kv_a_norm = t.require(layer_tensor(l, "attn_kv_a_norm.weight"), {c.kv_lora_rank}).f32();
    m.wo = t.require(layer_tensor(l, "attn_output.weight"), {c.n_head * c.v_head_dim, c.n_embd}).matrix();
    if (t.has(layer_tensor(l, "attn_k_b.weight"))) {
      const Tensor kb = t.require(layer_tensor(l, "attn_k_b.weight"), {c.qk_nope_dim, c.kv_lora_rank, c.n_head});
      const Tensor vb = t.require(layer_tensor(l, "attn_v_b.weight"), {c.kv_lora_rank, c.v_head_dim, c.n_head});
      for (int64_t h = 0; h < c.n_head; ++h) {
        m.k_b.push_back(kb.slice(h));
        m.v_b.push_back(vb.slice(h));
      }
    } else {
      split_kv_b(t.require(layer_tensor(l, "attn_kv_b.weight"), {c.kv_lora_rank, c.n_head * (c.qk_nope_dim + c.v_head_dim)}), m);
    }
    return m;
  }

  // Older conversions keep W_kb and W_vb stacked per head in attn_kv_b rows
  // [k_nope rows | v rows]. The value rows are used in place; the key rows are transposed
  // once into f32 so the query can be mapped into the latent space with a plain product.
  void split_kv_b(const Tensor& kv_b, MlaLayer& m) {
    const ModelConfig& c = config_;
    const int64_t per_head = c.qk_nope_dim + c.v_head_dim;
    const size_t rb = row_bytes(kv_b.type, c.kv_lora_rank);
    m.k_b_owned.resize(size_t(c.n_head * c.kv_lora_rank * c.qk_nope_dim));
    std::vector<float> row(size_t(c.kv_lora_rank));
    for (int64_t h = 0; h < c.n_head; ++h) {
      float* dst = m.k_b_owned.data() + h * c.kv_lora_rank * c.qk_nope_dim;
      for (int64_t i = 0; i < c.qk_nope_dim; ++i) {
        dequantize_row(kv_b.type, kv_b.data + size_t(h * per_head + i) * rb, row.data(), c.kv_lora_rank);
        for (int64_t r = 0; r < c.kv_lora_rank; ++r) dst[r * c.qk_nope_dim + i] = row[size_t(r)];
      }
      m.k_b.push_back(QMatrix{GgmlType::F32, c.kv_lora_rank, c.qk_nope_dim, dst, size_t(c.qk_nope_dim) * 4});
      m.v_b.push_back(QMatrix{kv_b.type, c.v_head_dim, c.kv_lora_rank,
                              kv_b.data + size_t(h * per_head + c.qk_nope_dim) * rb, rb});
    }
  }

  void mark_attention_for_regrouping(WeightRegrouper& r) override {
    for (MlaLayer& m : layers_) {
      for (QMatrix* w : {&m.wq_a, &m.wq, &m.wkv_a, &m.wo}) r.add(*w);
      for (QMatrix& k : m.k_b) r.add(k);
      for (QMatrix& v : m.v_b) r.add(v);
    }
  }

  std::vector<QMatrix> attention_matrices(int64_t l) const override {
    const MlaLayer& m = layers_[size_t(l)];
    std::vector<QMatrix> ms;
    if (m.wq_a.data) ms.push_back(m.wq_a);
    ms.push_back(m.wkv_a);
    ms.push_back(m.wq);
    ms.insert(ms.end(), m.k_b.begin(), m.k_b.end());
    ms.insert(ms.end(), m.v_b.begin(), m.v_b.end());
    ms.push_back(m.wo);
    return ms;
  }

  void attention(int64_t l, const Step& step, const float* h, float* x, KvStore& kv, ThreadPool& pool) override {
    const ModelConfig& c = config_;
    const MlaLayer& m = layers_[size_t(l)];
    const int64_t T = int64_t(step.tokens.size());
    const int64_t n_head = c.n_head, nope = c.qk_nope_dim, rope_dim = c.qk_rope_dim;
    const int64_t qk = nope + rope_dim, lora = c.kv_lora_rank, row_floats = lora + rope_dim;
    const int64_t q_ld = n_head * qk, full_ld = n_head * row_floats, lat_ld = n_head * lora;
    const int64_t o_ld = n_head * c.v_head_dim;

    q_.resize(size_t(T * q_ld));
    ckv_.resize(size_t(T * row_floats));
    if (m.wq_a.data) {
      qa_.resize(size_t(T * c.q_lora_rank));
      projs_ = {{m.wq_a, h, c.n_embd, qa_.data(), c.q_lora_rank}, {m.wkv_a, h, c.n_embd, ckv_.data(), row_floats}};
      projector().run(projs_, T, pool);
      for (int64_t t = 0; t < T; ++t) {
        float* r = qa_.data() + t * c.q_lora_rank;
        rms_norm(r, m.q_a_norm, r, c.q_lora_rank, c.rms_eps);
      }
      projector().run(m.wq, qa_.data(), c.q_lora_rank, q_.data(), q_ld, T, pool);
    } else {
      projs_ = {{m.wq, h, c.n_embd, q_.data(), q_ld}, {m.wkv_a, h, c.n_embd, ckv_.data(), row_floats}};
      projector().run(projs_, T, pool);
    }

    // Latent rows into the cache, rope on the shared key and on every head's rope query.
    int64_t t = 0;
    row_.resize(size_t(row_floats));
    float* r = row_.data();
    for (const SeqSlice& s : step.seqs) {
      for (int64_t i = 0; i < s.n_tokens; ++i, ++t) {
        const float* src = ckv_.data() + t * row_floats;
        rms_norm(src, m.kv_a_norm, r, lora, c.rms_eps);
        std::copy_n(src + lora, rope_dim, r + lora);
        apply_rope(r + lora, 1, rope_dim, rope().cos_sin(t), int(rope_dim), c.rope_style);
        kv.write_row(l, *s.block_table, s.pos0 + i, r);
        apply_rope(q_.data() + t * q_ld + nope, n_head, qk, rope().cos_sin(t), int(rope_dim), c.rope_style);
      }
    }

    // Queries into the latent space: full = [W_kb q_nope | q_rope] per head.
    full_.resize(size_t(T * full_ld));
    projs_.clear();
    for (int64_t hd = 0; hd < n_head; ++hd) {
      projs_.push_back({m.k_b[size_t(hd)], q_.data() + hd * qk, q_ld, full_.data() + hd * row_floats, full_ld});
    }
    projector().run(projs_, T, pool);
    for (int64_t tt = 0; tt < T; ++tt) {
      for (int64_t hd = 0; hd < n_head; ++hd) {
        std::copy_n(q_.data() + tt * q_ld + hd * qk + nope, rope_dim, full_.data() + tt * full_ld + hd * row_floats + lora);
      }
    }

    AttentionShape shape;
    shape.n_q_heads = int(n_head);
    shape.n_kv_heads = 1;
    shape.dk = row_floats;
    shape.dv = lora;
    shape.scale = c.kq_scale;
    latent_.resize(size_t(T * lat_ld));
    attend_slices(l, step, shape, full_.data(), full_ld, latent_.data(), lat_ld, kv, pool);

    // Latent outputs back to per-head values, then the output projection.
    o_.resize(size_t(T * o_ld));
    projs_.clear();
    for (int64_t hd = 0; hd < n_head; ++hd) {
      projs_.push_back({m.v_b[size_t(hd)], latent_.data() + hd * lora, lat_ld, o_.data() + hd * c.v_head_dim, o_ld});
    }
    projector().run(projs_, T, pool);
    attn_out_.resize(size_t(T * c.n_embd));
    projector().run(m.wo, o_.data(), o_ld, attn_out_.data(), c.n_embd, T, pool);
    for (int64_t i = 0; i < T * c.n_embd; ++i) x[i] += attn_out_[size_t(i)];
  }

  std::vector<MlaLayer> layers_;
  std::vector<Projection> projs_;
  std::vector<float> q_, qa_, ckv_, row_, full_, latent_, o_, attn_out_;
};

}  // namespace

std::unique_ptr<Model> make_deepseek2(std::unique_ptr<GgufFile> file, ModelConfig config) {
  return std::make_unique<Deepseek2>(std::move(file), std::move(config));
}

}  // namespace moe
