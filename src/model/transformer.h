#pragma once
// The parts every supported architecture shares: token embedding, RMSNorm, the MoE block
// (router, routed + shared experts, or a dense FFN), the output head and the step loop.
// An architecture supplies its weights and its attention block.
#include <random>
#include <vector>

#include "kernels/attention.h"
#include "kernels/ops.h"
#include "model/linear.h"
#include "model/model.h"
#include "model/weights.h"
#include "moe/ffn_jobs.h"

namespace moe {

struct FfnLayerWeights {
  Tensor norm;           // f32 [n_embd]
  FfnWeights dense;      // dense layers (gate.data == nullptr on MoE layers)
  Tensor router;         // [n_embd, n_experts]
  Tensor router_bias;    // f32 [n_experts] (DeepSeek-V3 exp_probs_b), optional
  Tensor gate_exps;      // [n_embd, n_ff_expert, n_experts]
  Tensor up_exps;        // [n_embd, n_ff_expert, n_experts]
  Tensor down_exps;      // [n_ff_expert, n_embd, n_experts]
  FfnWeights shared;     // shared experts (gate.data == nullptr when none)
};

// DeepSeek's MTP layer beside its decoder layer (attention and FFN at index n_layer).
struct MtpWeights {
  QMatrix eh_proj;    // [n_embd, 2 * n_embd]: concat(enorm(embedding), hnorm(hidden)) -> n_embd
  Tensor enorm;       // f32 [n_embd]
  Tensor hnorm;       // f32 [n_embd]
  Tensor head_norm;   // f32 [n_embd] (shared_head_norm)
  Tensor embed;       // [n_embd, n_vocab], or the model's token_embd when absent
  Tensor head;        // [n_embd, n_vocab], or the model's output when absent
};

class Transformer : public Model {
 public:
  void forward(const Step& step, KvStore& kv, float* logits, ThreadPool& pool) override;
  const float* hidden_states() const override { return hidden_.data(); }
  void forward_mtp(const Step& step, const float* hidden, KvStore& kv, float* logits, float* hidden_out,
                   ThreadPool& pool) override;
  bool step_idle(ThreadPool& pool) override;
  // Also tells the group where this model's routed experts' weights are.
  void set_expert_parallel(ExpertParallel* ep) override;

 protected:
  Transformer(std::unique_ptr<GgufFile> file, ModelConfig config);

  // Loads embedding, output and every layer's norms and FFN weights, and sums the bytes
  // read per token; architectures call it at the end of their constructor, after loading
  // their attention weights.
  void finish_load(const TensorTable& table);

  // Adds the attention block's output for all step tokens to x. `h` holds the normed
  // input [T, n_embd]; rope tables are built for the step's positions.
  virtual void attention(int64_t layer, const Step& step, const float* h, float* x, KvStore& kv,
                         ThreadPool& pool) = 0;
  void mark_for_regrouping(WeightRegrouper& r, bool routed_experts) override;
  // The attention block's part of it.
  virtual void mark_attention_for_regrouping(WeightRegrouper& r) = 0;
  // One layer's attention weight matrices, in the order a step multiplies with them.
  virtual std::vector<QMatrix> attention_matrices(int64_t layer) const = 0;
  std::vector<QMatrix> token_matrices(std::mt19937& rng) const override;

  // Runs attention for every sequence slice of the step: q [T, ...] rows q_ld apart, out
  // [T, ...] rows out_ld apart, each slice over its own block table, all in one parallel
  // dispatch.
  void attend_slices(int64_t layer, const Step& step, const AttentionShape& shape, const float* q, int64_t q_ld,
                     float* out, int64_t out_ld, KvStore& kv, ThreadPool& pool);

  const RopeTable& rope() const { return rope_; }
  const std::vector<int32_t>& positions() const { return positions_; }
  Projector& projector() { return projector_; }

  Tensor token_embd_;   // [n_embd, n_vocab]
  Tensor output_norm_;  // f32 [n_embd]
  Tensor output_;       // [n_embd, n_vocab]
  std::vector<Tensor> attn_norm_;  // f32 [n_embd] per layer
  std::vector<FfnLayerWeights> ffn_;

 private:
  void ffn_block(int64_t layer, int64_t n_tokens, float* x, ThreadPool& pool);
  // The router of MoE layer `layer` for h [n_tokens, n_embd]: route_ids_ and
  // route_weights_ [n_tokens, n_used].
  void route(int64_t layer, int64_t n_tokens, const float* h, ThreadPool& pool);
  // The routed and shared experts of MoE layer `layer` for h [n_tokens, n_embd] into
  // ffn_out_, across the expert-parallel group.
  void expert_parallel_moe(int64_t layer, int64_t n_tokens, const float* h, ThreadPool& pool);
  void embed(const Tensor& table, const std::vector<int32_t>& tokens, float* x) const;
  // Checks the step's slices against the store and fills positions_ and the rope tables.
  void set_positions(const Step& step, const KvStore& kv);
  // The final norm of the rows whose logits the slices want, then the head into logits.
  void logits_of(const Step& step, const Tensor& norm, const Tensor& head, float* logits, ThreadPool& pool);

  Projector projector_;
  FfnRunner ffn_runner_;
  RopeTable rope_;
  std::vector<int32_t> positions_;
  std::vector<const uint8_t*> block_ptrs_;  // every sequence's, one after another
  std::vector<AttentionSeq> attention_seqs_;
  MtpWeights mtp_;
  std::vector<float> x_, h_, ffn_out_, router_logits_, route_weights_, route_scratch_, hidden_, mtp_in_;
  std::vector<int32_t> route_ids_;
  uint64_t expert_bytes_ = 0;          // one routed expert's gate, up and down rows
  std::vector<uint8_t> expert_seen_;   // scratch: which experts a layer's tokens chose
  std::vector<int64_t> moe_index_;   // per layer: its index among the MoE layers, or -1
  std::vector<int64_t> moe_layers_;  // per MoE layer: its layer
};

}  // namespace moe
