#include "model/transformer.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/quant.h"
#include "model/weight_regroup.h"
#include "moe/expert_parallel.h"

namespace moe {
namespace {

FfnWeights routed_expert(const FfnLayerWeights& f, int32_t e) {
  return {f.gate_exps.slice(e), f.up_exps.slice(e), f.down_exps.slice(e)};
}


FfnWeights load_ffn(const TensorTable& t, int64_t layer, const char* suffix, int64_t n_embd, int64_t n_ff) {
  const std::string s = suffix;
  return FfnWeights{t.require(layer_tensor(layer, ("ffn_gate" + s + ".weight").c_str()), {n_embd, n_ff}).matrix(),
                    t.require(layer_tensor(layer, ("ffn_up" + s + ".weight").c_str()), {n_embd, n_ff}).matrix(),
                    t.require(layer_tensor(layer, ("ffn_down" + s + ".weight").c_str()), {n_ff, n_embd}).matrix()};
}

}  // namespace

int64_t Step::n_logit_rows() const {
  int64_t n = 0;
  for (const auto& s : seqs) {
    if (s.n_tokens <= 0 || s.logits == LogitRows::kNone) continue;
    n += s.logits == LogitRows::kAll ? s.n_tokens : 1;
  }
  return n;
}

Transformer::Transformer(std::unique_ptr<GgufFile> file, ModelConfig config)
    : Model(std::move(file), std::move(config)) {}

void Transformer::finish_load(const TensorTable& t) {
  ModelConfig& c = config_;
  const GgufTensorInfo* embd = file_->find_tensor("token_embd.weight");
  if (!embd) fail("{}: tensor 'token_embd.weight' is missing", file_->path());
  if (c.n_vocab == 0 && embd->ne.size() == 2) c.n_vocab = embd->ne[1];
  token_embd_ = t.require("token_embd.weight", {c.n_embd, c.n_vocab});
  output_norm_ = t.require("output_norm.weight", {c.n_embd});
  output_norm_.f32();
  output_ = t.optional("output.weight", {c.n_embd, c.n_vocab});
  if (!output_) output_ = token_embd_;  // tied embeddings

  const int64_t n_exp = c.gating.n_experts;
  int64_t n_moe = 0;
  for (int64_t l = 0; l < c.n_layer + c.n_nextn; ++l) {
    attn_norm_.push_back(t.require(layer_tensor(l, "attn_norm.weight"), {c.n_embd}));
    attn_norm_.back().f32();
    FfnLayerWeights f;
    f.norm = t.require(layer_tensor(l, "ffn_norm.weight"), {c.n_embd});
    f.norm.f32();
    moe_index_.push_back(c.is_moe_layer(l) ? n_moe++ : -1);
    if (c.is_moe_layer(l)) moe_layers_.push_back(l);
    if (!c.is_moe_layer(l)) {
      f.dense = load_ffn(t, l, "", c.n_embd, c.n_ff_dense);
    } else {
      f.router = t.require(layer_tensor(l, "ffn_gate_inp.weight"), {c.n_embd, n_exp});
      f.router_bias = t.optional(layer_tensor(l, "exp_probs_b.bias"), {n_exp});
      if (f.router_bias) f.router_bias.f32();
      f.gate_exps = t.require(layer_tensor(l, "ffn_gate_exps.weight"), {c.n_embd, c.n_ff_expert, n_exp});
      f.up_exps = t.require(layer_tensor(l, "ffn_up_exps.weight"), {c.n_embd, c.n_ff_expert, n_exp});
      f.down_exps = t.require(layer_tensor(l, "ffn_down_exps.weight"), {c.n_ff_expert, c.n_embd, n_exp});
      if (c.n_shared_experts > 0) {
        f.shared = load_ffn(t, l, "_shexp", c.n_embd, c.n_ff_expert * c.n_shared_experts);
      }
    }
    ffn_.push_back(f);
  }
  if (c.n_nextn > 0) {
    const int64_t m = c.n_layer;
    mtp_.eh_proj = t.require(layer_tensor(m, "nextn.eh_proj.weight"), {2 * c.n_embd, c.n_embd}).matrix();
    mtp_.enorm = t.require(layer_tensor(m, "nextn.enorm.weight"), {c.n_embd});
    mtp_.hnorm = t.require(layer_tensor(m, "nextn.hnorm.weight"), {c.n_embd});
    mtp_.head_norm = t.require(layer_tensor(m, "nextn.shared_head_norm.weight"), {c.n_embd});
    for (const Tensor* n : {&mtp_.enorm, &mtp_.hnorm, &mtp_.head_norm}) n->f32();
    // Files converted from DeepSeek's checkpoints may leave out the layer's own copies of
    // the embedding and the head, which are the model's.
    mtp_.embed = t.optional(layer_tensor(m, "nextn.embed_tokens.weight"), {c.n_embd, c.n_vocab});
    if (!mtp_.embed) mtp_.embed = token_embd_;
    mtp_.head = t.optional(layer_tensor(m, "nextn.shared_head_head.weight"), {c.n_embd, c.n_vocab});
    if (!mtp_.head) mtp_.head = output_;
  }
  if (!moe_layers_.empty()) {
    const FfnWeights w = routed_expert(ffn_[size_t(moe_layers_.front())], 0);
    for (const QMatrix* m : {&w.gate, &w.up, &w.down}) expert_bytes_ += uint64_t(m->rows) * m->row_stride;
  }
  // A token reads as many bytes whichever experts it is routed to.
  std::mt19937 any_experts;
  for (const QMatrix& m : token_matrices(any_experts)) {
    active_bytes_ += uint64_t(m.rows) * m.row_stride;
    active_params_ += uint64_t(m.rows * m.cols);
  }
  total_bytes_ = t.bytes_used();
}

std::vector<QMatrix> Transformer::token_matrices(std::mt19937& rng) const {
  const ModelConfig& c = config_;
  std::vector<QMatrix> ms;
  auto add = [&](const QMatrix& m) {
    if (m.data) ms.push_back(m);
  };
  std::vector<int32_t> experts(size_t(c.gating.n_experts));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    for (const QMatrix& m : attention_matrices(l)) add(m);
    const FfnLayerWeights& f = ffn_[size_t(l)];
    if (!c.is_moe_layer(l)) {
      for (const QMatrix* m : {&f.dense.gate, &f.dense.up, &f.dense.down}) add(*m);
      continue;
    }
    add(f.router.matrix());
    std::iota(experts.begin(), experts.end(), 0);
    std::shuffle(experts.begin(), experts.end(), rng);
    std::vector<FfnWeights> jobs;
    for (int i = 0; i < c.gating.n_used; ++i) jobs.push_back(routed_expert(f, experts[size_t(i)]));
    if (f.shared.gate.data) jobs.push_back(f.shared);
    // The FFN's two phases: every job's gate and up rows, then every job's down rows.
    for (const FfnWeights& w : jobs) {
      add(w.gate);
      add(w.up);
    }
    for (const FfnWeights& w : jobs) add(w.down);
  }
  add(output_.matrix());
  return ms;
}

void Transformer::mark_for_regrouping(WeightRegrouper& r, bool routed_experts) {
  r.add(output_);
  if (mtp_.eh_proj.data) r.add(mtp_.eh_proj);
  if (mtp_.head && mtp_.head.data != output_.data) r.add(mtp_.head);
  for (FfnLayerWeights& f : ffn_) {
    for (FfnWeights* w : {&f.dense, &f.shared}) {
      for (QMatrix* m : {&w->gate, &w->up, &w->down}) r.add(*m);
    }
    if (routed_experts) {
      for (Tensor* t : {&f.gate_exps, &f.up_exps, &f.down_exps}) r.add(*t);
    }
  }
  mark_attention_for_regrouping(r);
}

void Transformer::embed(const Tensor& table, const std::vector<int32_t>& tokens, float* x) const {
  const int64_t n_embd = config_.n_embd;
  const size_t rb = row_bytes(table.type, n_embd);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t id = tokens[i];
    if (id < 0 || id >= config_.n_vocab) fail("token id {} is outside the vocabulary (0..{})", id, config_.n_vocab - 1);
    dequantize_row(table.type, table.data + size_t(id) * rb, x + int64_t(i) * n_embd, n_embd);
  }
}

void Transformer::ffn_block(int64_t layer, int64_t n_tokens, float* x, ThreadPool& pool) {
  const ModelConfig& c = config_;
  const FfnLayerWeights& f = ffn_[size_t(layer)];
  const int64_t n_embd = c.n_embd;
  float* h = h_.data();
  for (int64_t t = 0; t < n_tokens; ++t) rms_norm(x + t * n_embd, f.norm.f32(), h + t * n_embd, n_embd, c.rms_eps);

  if (ep_ && moe_index_[size_t(layer)] >= 0) {
    expert_parallel_moe(layer, n_tokens, h, pool);
    for (int64_t i = 0; i < n_tokens * n_embd; ++i) x[i] += ffn_out_[size_t(i)];
    return;
  }
  ffn_runner_.reset(n_tokens, n_embd);
  if (!c.is_moe_layer(layer)) {
    for (int64_t t = 0; t < n_tokens; ++t) ffn_runner_.add(f.dense, int32_t(t), 1.0f);
  } else {
    route(layer, n_tokens, h, pool);
    const int k = c.gating.n_used;
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int i = 0; i < k; ++i) {
        ffn_runner_.add(routed_expert(f, route_ids_[size_t(t * k + i)]), int32_t(t), route_weights_[size_t(t * k + i)]);
      }
      if (f.shared.gate.data) ffn_runner_.add(f.shared, int32_t(t), 1.0f);
    }
  }
  ffn_runner_.run(h, n_embd, ffn_out_.data(), n_embd, pool);
  for (int64_t i = 0; i < n_tokens * n_embd; ++i) x[i] += ffn_out_[size_t(i)];
}

void Transformer::route(int64_t layer, int64_t n_tokens, const float* h, ThreadPool& pool) {
  const ModelConfig& c = config_;
  const FfnLayerWeights& f = ffn_[size_t(layer)];
  const int n_exp = c.gating.n_experts, k = c.gating.n_used;
  router_logits_.resize(size_t(n_tokens * n_exp));
  route_ids_.resize(size_t(n_tokens * k));
  route_weights_.resize(size_t(n_tokens * k));
  route_scratch_.resize(size_t(2 * n_exp));
  if (n_tokens > 0) projector_.run(f.router.matrix(), h, c.n_embd, router_logits_.data(), n_exp, n_tokens, pool);
  const float* bias = f.router_bias ? f.router_bias.f32() : nullptr;
  for (int64_t t = 0; t < n_tokens; ++t) {
    route_token(c.gating, router_logits_.data() + t * n_exp, bias, route_ids_.data() + t * k,
                route_weights_.data() + t * k, route_scratch_.data());
  }
  if (layer < c.n_layer) {
    expert_seen_.assign(size_t(n_exp), 0);
    for (int32_t e : route_ids_) {
      if (!expert_seen_[size_t(e)]++) last_step_bytes_ += expert_bytes_;
    }
  }
}

void Transformer::expert_parallel_moe(int64_t layer, int64_t n_tokens, const float* h, ThreadPool& pool) {
  const ModelConfig& c = config_;
  const FfnLayerWeights& f = ffn_[size_t(layer)];
  route(layer, n_tokens, h, pool);
  MoeLayerInput in;
  in.moe_layer = moe_index_[size_t(layer)];
  in.h = h;
  in.n_tokens = n_tokens;
  in.n_embd = c.n_embd;
  in.ids = route_ids_.data();
  in.weights = route_weights_.data();
  in.k = c.gating.n_used;
  in.shared = f.shared.gate.data ? &f.shared : nullptr;
  ep_->run_layer(in, ffn_runner_, ffn_out_.data(), pool);
}

void Transformer::set_expert_parallel(ExpertParallel* ep) {
  Model::set_expert_parallel(ep);
  if (!ep) return;
  ep->set_weight_source(
      [this](int64_t moe_layer, int32_t e) { return routed_expert(ffn_[size_t(moe_layers_[size_t(moe_layer)])], e); });
}

bool Transformer::step_idle(ThreadPool& pool) {
  if (!ep_) fail("step_idle: the model is not part of an expert-parallel group");
  if (!ep_->join_step(ExpertParallel::StepWork::none)) return false;
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    if (config_.is_moe_layer(l)) expert_parallel_moe(l, 0, nullptr, pool);
  }
  return true;
}

void Transformer::attend_slices(int64_t layer, const Step& step, const AttentionShape& shape, const float* q,
                                int64_t q_ld, float* out, int64_t out_ld, KvStore& kv, ThreadPool& pool) {
  size_t n_pointers = 0;
  for (const SeqSlice& s : step.seqs) {
    if (s.n_tokens > 0) n_pointers += s.block_table->size();
  }
  block_ptrs_.resize(n_pointers);
  attention_seqs_.clear();
  size_t at = 0;
  int64_t t = 0;
  for (const SeqSlice& s : step.seqs) {
    if (s.n_tokens <= 0) continue;
    const KvView view = kv.view(layer, *s.block_table, block_ptrs_.data() + at);
    at += s.block_table->size();
    attention_seqs_.push_back({q + t * q_ld, q_ld, s.n_tokens, s.pos0, view, out + t * out_ld, out_ld});
    t += s.n_tokens;
  }
  moe::attention_batch(shape, attention_seqs_, pool);
}

void Transformer::set_positions(const Step& step, const KvStore& kv) {
  const int64_t n_tokens = int64_t(step.tokens.size());
  int64_t covered = 0;
  positions_.clear();
  for (const SeqSlice& s : step.seqs) {
    if (s.n_tokens <= 0) continue;
    if (!s.block_table || kv.capacity(s.block_table->size()) < s.pos0 + s.n_tokens) {
      fail("forward: a sequence needs {} KV positions but its block table holds {}", s.pos0 + s.n_tokens,
           s.block_table ? kv.capacity(s.block_table->size()) : 0);
    }
    for (int64_t i = 0; i < s.n_tokens; ++i) positions_.push_back(int32_t(s.pos0 + i));
    covered += s.n_tokens;
  }
  if (covered != n_tokens) fail("forward: slices cover {} tokens but the step has {}", covered, n_tokens);
  rope_.build(config_.rope, positions_.data(), n_tokens);
}

void Transformer::logits_of(const Step& step, const Tensor& norm, const Tensor& head, float* logits, ThreadPool& pool) {
  const ModelConfig& c = config_;
  const int64_t n_embd = c.n_embd;
  // Final norm only for the rows whose logits are wanted.
  int64_t row = 0, offset = 0;
  for (const SeqSlice& s : step.seqs) {
    if (s.n_tokens <= 0) continue;
    const int64_t first = s.logits == LogitRows::kAll ? 0 : s.logits == LogitRows::kLast ? s.n_tokens - 1 : s.n_tokens;
    for (int64_t i = first; i < s.n_tokens; ++i, ++row) {
      rms_norm(x_.data() + (offset + i) * n_embd, norm.f32(), h_.data() + row * n_embd, n_embd, c.rms_eps);
    }
    offset += s.n_tokens;
  }
  if (row > 0) projector_.run(head.matrix(), h_.data(), n_embd, logits, c.n_vocab, row, pool);
}

void Transformer::forward(const Step& step, KvStore& kv, float* logits, ThreadPool& pool) {
  const ModelConfig& c = config_;
  const int64_t n_tokens = int64_t(step.tokens.size());
  const int64_t n_embd = c.n_embd;
  if (n_tokens == 0) return;
  set_positions(step, kv);
  if (ep_) {
    const bool prefill = std::any_of(step.seqs.begin(), step.seqs.end(), [](const SeqSlice& s) { return s.n_tokens > 1; });
    ep_->join_step(prefill ? ExpertParallel::StepWork::prefill : ExpertParallel::StepWork::decode);
  }

  x_.resize(size_t(n_tokens * n_embd));
  h_.resize(size_t(n_tokens * n_embd));
  ffn_out_.resize(size_t(n_tokens * n_embd));
  embed(token_embd_, step.tokens, x_.data());
  const auto decoder_moe_layers = std::count_if(moe_layers_.begin(), moe_layers_.end(), [&](int64_t l) { return l < c.n_layer; });
  last_step_bytes_ = active_bytes_ - uint64_t(decoder_moe_layers) * uint64_t(c.gating.n_used) * expert_bytes_;

  for (int64_t l = 0; l < c.n_layer; ++l) {
    float* h = h_.data();
    for (int64_t t = 0; t < n_tokens; ++t) {
      rms_norm(x_.data() + t * n_embd, attn_norm_[size_t(l)].f32(), h + t * n_embd, n_embd, c.rms_eps);
    }
    attention(l, step, h, x_.data(), kv, pool);
    ffn_block(l, n_tokens, x_.data(), pool);
  }
  if (step.want_hidden) {
    hidden_.resize(size_t(n_tokens * n_embd));
    for (int64_t t = 0; t < n_tokens; ++t) {
      rms_norm(x_.data() + t * n_embd, output_norm_.f32(), hidden_.data() + t * n_embd, n_embd, c.rms_eps);
    }
  }
  logits_of(step, output_norm_, output_, logits, pool);
}

void Transformer::forward_mtp(const Step& step, const float* hidden, KvStore& kv, float* logits, float* hidden_out,
                              ThreadPool& pool) {
  const ModelConfig& c = config_;
  if (c.n_nextn <= 0) fail("{}: the model has no MTP layer (nextn_predict_layers)", file_->path());
  if (kv.n_layers() <= c.n_layer) fail("forward_mtp: the KV cache has no rows for the MTP layer (make_kv_store with_mtp)");
  const int64_t n_tokens = int64_t(step.tokens.size());
  const int64_t n_embd = c.n_embd;
  const int64_t l = c.n_layer;
  if (n_tokens == 0) {
    // The group's exchange for the layer's experts, with none of this rank's tokens.
    if (ep_ && moe_index_[size_t(l)] >= 0) expert_parallel_moe(l, 0, nullptr, pool);
    return;
  }
  set_positions(step, kv);
  x_.resize(size_t(n_tokens * n_embd));
  h_.resize(size_t(n_tokens * n_embd));
  ffn_out_.resize(size_t(n_tokens * n_embd));
  // Each token's input is eh_proj over [enorm(its embedding), hnorm(the hidden state before it)].
  mtp_in_.resize(size_t(n_tokens * 2 * n_embd));
  embed(mtp_.embed, step.tokens, h_.data());
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* in = mtp_in_.data() + t * 2 * n_embd;
    rms_norm(h_.data() + t * n_embd, mtp_.enorm.f32(), in, n_embd, c.rms_eps);
    rms_norm(hidden + t * n_embd, mtp_.hnorm.f32(), in + n_embd, n_embd, c.rms_eps);
  }
  projector_.run(mtp_.eh_proj, mtp_in_.data(), 2 * n_embd, x_.data(), n_embd, n_tokens, pool);
  for (int64_t t = 0; t < n_tokens; ++t) {
    rms_norm(x_.data() + t * n_embd, attn_norm_[size_t(l)].f32(), h_.data() + t * n_embd, n_embd, c.rms_eps);
  }
  attention(l, step, h_.data(), x_.data(), kv, pool);
  ffn_block(l, n_tokens, x_.data(), pool);
  if (hidden_out) std::copy(x_.begin(), x_.begin() + n_tokens * n_embd, hidden_out);
  logits_of(step, mtp_.head_norm, mtp_.head, logits, pool);
}

}  // namespace moe
