#include "sim/cost_model.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "proxy/policy/prefill_latency_model.h"

namespace moe::sim {

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
}

StepBreakdown& StepBreakdown::operator+=(const StepBreakdown& o) {
  total += o.total;
  dense_layers += o.dense_layers;
  moe_layers += o.moe_layers;
  experts += o.experts;
  comm += o.comm;
  lm_head += o.lm_head;
  draft += o.draft;
  overhead += o.overhead;
  return *this;
}

StepBreakdown StepBreakdown::scaled(double f) const {
  StepBreakdown s;
  s += *this;
  s.total *= f;
  s.dense_layers *= f;
  s.moe_layers *= f;
  s.experts *= f;
  s.comm *= f;
  s.lm_head *= f;
  s.draft *= f;
  s.overhead *= f;
  return s;
}

CostModel::CostModel(const SimConfig& config, const PoolConfig& pool, Phase phase, std::vector<double> layer_imbalance)
    : c_(config), pool_(pool), phase_(phase), imbalance_(std::move(layer_imbalance)) {
  wbytes_ = c_.precision.weight_bytes();
  compute_ = c_.precision.compute_type();
  c_.hardware.peak_flops(compute_);
  per_node_ = std::min(pool_.devices, c_.hardware.devices_per_node);
  nodes_ = (pool_.devices + per_node_ - 1) / per_node_;
  if (int64_t(imbalance_.size()) != c_.model.moe_layers()) fail("cost model: one imbalance per MoE layer is needed");
  if (kv_capacity_tokens() < 1)
    fail("{}: the weights ({:.1f} GiB per device) leave no room for a KV cache in {} GiB x mem_util {}; give "
         "kv_cache_gib or more devices", c_.file, weight_bytes_per_device() / kGiB, c_.hardware.mem_gib, pool_.mem_util);
}

double CostModel::op_time(double flops, double bytes, const std::string& type, double eff_compute, double eff_memory) const {
  const double compute = flops / (c_.hardware.peak_flops(type) * eff_compute);
  const double memory = bytes / (c_.hardware.mem_bw * eff_memory);
  return std::max(compute, memory);
}

void CostModel::add_sequence(RankBatch& b, int64_t n, int64_t context, bool logits) const {
  const ModelShape& m = c_.model;
  const double pairs = routing::attention_pairs(n, context);
  // Absorbed MLA reads the latent as keys and values; the expanded form is cheaper per pair
  // but first expands every position's latent: kernels pick the cheaper (prefill: expanded).
  const double absorbed = pairs * m.absorbed_pair_flops();
  const double expanded = pairs * m.expanded_pair_flops() + double(context + n) * m.expand_flops_per_token();
  b.attention_flops += std::min(absorbed, expanded);
  b.kv_tokens_read += double(context + n);
  b.tokens += n;
  b.sequences += 1;
  if (logits) b.logit_rows += 1;
}

void CostModel::add_decodes(RankBatch& b, int64_t sequences, int64_t tokens_each, double context_sum) const {
  if (sequences == 0) return;
  const double n = double(tokens_each), s = double(sequences);
  const double pairs = n * context_sum + s * n * (n + 1) / 2;
  b.attention_flops += pairs * c_.model.absorbed_pair_flops();
  b.kv_tokens_read += context_sum + s * n;
  b.tokens += sequences * tokens_each;
  b.sequences += sequences;
  b.logit_rows += sequences * tokens_each;
  if (tokens_each > 1) b.draft_tokens += sequences;
}

double CostModel::kv_bytes_per_token() const {
  const ModelShape& m = c_.model;
  const double layers = double(m.layers + (c_.deployment.mtp.draft_tokens > 0 ? m.mtp_layers : 0));
  // A GQA cache splits its heads over the tensor-parallel devices; the MLA latent is one
  // vector per token, held whole by each of them.
  const double per_rank = m.attention.kind == AttentionKind::mla ? double(pool_.attention_tp) : 1.0;
  return layers * m.kv_values_per_token_layer() * c_.precision.kv_bytes() * per_rank;
}

double CostModel::weight_bytes_per_device() const {
  const ModelShape& m = c_.model;
  const int64_t layers = m.layers + (c_.deployment.mtp.draft_tokens > 0 ? m.mtp_layers : 0);
  const int64_t moe_layers = m.moe_layers() + (c_.deployment.mtp.draft_tokens > 0 ? m.mtp_layers : 0);
  const double replicated = 2.0 * double(m.vocab * m.hidden) + double(layers) * m.attention_params() +
                            double(m.dense_layers) * m.dense_ffn_params() +
                            double(moe_layers) * (double(m.shared_experts) * m.expert_params() + double(m.hidden * m.experts));
  const double slots = m.experts > 0 ? double(m.experts + pool_.redundant_experts) / double(pool_.ep) : 0;
  return (replicated / double(pool_.attention_tp) + double(moe_layers) * slots * m.expert_params()) * wbytes_;
}

int64_t CostModel::kv_capacity_tokens() const {
  const double per_device =
      pool_.kv_cache_gib > 0 ? pool_.kv_cache_gib * kGiB : pool_.mem_util * c_.hardware.mem_gib * kGiB - weight_bytes_per_device();
  if (per_device <= 0) return 0;
  return int64_t(per_device * double(pool_.attention_tp) / kv_bytes_per_token());
}

double CostModel::transfer_seconds(double bytes, bool scale_up) const {
  const Link& link = scale_up ? c_.hardware.scale_up : c_.hardware.scale_out;
  const double eff = scale_up ? c_.hardware.efficiency.scale_up : c_.hardware.efficiency.scale_out;
  return link.latency_s + bytes / (link.bw * eff);
}

double CostModel::all_to_all(double tokens) const {
  const ModelShape& m = c_.model;
  if (pool_.ep <= 1 || tokens <= 0) return 0;
  const double k = double(m.experts_per_token), n = double(nodes_), devices = double(pool_.devices);
  const double hidden = double(m.hidden);
  // Dispatch sends fp8 activations where the GEMMs take them, combine returns bf16.
  const double dispatch_bytes = (compute_ == "fp8" || compute_ == "int8") ? 1.0 : 2.0, combine_bytes = 2.0;
  double intra_copies = 0, inter_copies = 0;
  if (nodes_ == 1) {
    intra_copies = k * (devices - 1) / devices;
  } else if (phase_ == Phase::decode) {
    // Low-latency kernels: every copy goes straight to its device.
    inter_copies = k * (n - 1) / n;
    intra_copies = k / n;
  } else {
    // Normal kernels: a token crosses to each remote node it visits once, then is forwarded
    // within that node; routing limits the nodes a token visits to groups_per_token.
    const double distinct = std::min(n * (1 - std::pow(1 - 1 / n, k)), std::min(n, double(m.groups_per_token)));
    inter_copies = distinct * (n - 1) / n;
    intra_copies = k;
  }
  const Hardware& hw = c_.hardware;
  auto leg = [&](double bytes_per_copy) {
    const double intra = intra_copies * tokens * hidden * bytes_per_copy / (hw.scale_up.bw * hw.efficiency.scale_up);
    const double inter = inter_copies * tokens * hidden * bytes_per_copy / (hw.scale_out.bw * hw.efficiency.scale_out);
    const double latency = nodes_ > 1 ? hw.scale_out.latency_s : hw.scale_up.latency_s;
    return std::max(intra, inter) + latency;
  };
  return leg(dispatch_bytes) + leg(combine_bytes);
}

double CostModel::expert_time(double total_tokens, double imbalance) const {
  const ModelShape& m = c_.model;
  const double k = double(m.experts_per_token), e = double(m.experts);
  const double visits = total_tokens * k / double(pool_.ep) * imbalance;
  const double slots = (e + double(pool_.redundant_experts)) / double(pool_.ep);
  // A held expert is read when some token visits it; the busiest device sees `imbalance`
  // times the mean traffic.
  const double touched = slots * (1 - std::pow(1 - k / e, total_tokens * imbalance));
  const Efficiency& eff = c_.hardware.efficiency;
  return op_time(visits * 2 * m.expert_params(), touched * m.expert_params() * wbytes_, compute_, eff.gemm, eff.memory);
}

StepBreakdown CostModel::step(std::span<const RankBatch> ranks) const {
  const ModelShape& m = c_.model;
  const Hardware& hw = c_.hardware;
  const Efficiency& eff = hw.efficiency;
  const double tp = double(pool_.attention_tp);
  const double kvb = m.kv_values_per_token_layer() * c_.precision.kv_bytes();
  const double shared = double(m.shared_experts) * m.expert_params() + double(m.hidden * m.experts);

  double dense_rank_max = 0, moe_rank_max = 0, head_max = 0, draft_rank_max = 0;
  double total_tokens = 0, draft_tokens = 0, max_rank_tokens = 0;
  for (const RankBatch& b : ranks) {
    if (b.tokens == 0) continue;
    const double t = double(b.tokens);
    // Tensor parallelism splits heads and weights over the rank's devices and adds two
    // all-reduces of the hidden state per layer.
    const double attn = op_time(b.attention_flops / tp, b.kv_tokens_read * kvb / (m.attention.kind == AttentionKind::gqa ? tp : 1),
                                hw.attention_type(), eff.attention_compute, eff.attention_memory);
    const double allreduce = tp > 1 ? 2 * 2 * (tp - 1) / tp * t * double(m.hidden) * 2 / (hw.scale_up.bw * eff.scale_up) : 0;
    const double proj = op_time(2 * t * m.attention_params() / tp, m.attention_params() / tp * wbytes_, compute_, eff.gemm, eff.memory);
    dense_rank_max = std::max(dense_rank_max, attn + proj + allreduce +
        op_time(2 * t * m.dense_ffn_params() / tp, m.dense_ffn_params() / tp * wbytes_, compute_, eff.gemm, eff.memory));
    moe_rank_max = std::max(moe_rank_max, attn + proj + allreduce +
        op_time(2 * t * shared / tp, shared / tp * wbytes_, compute_, eff.gemm, eff.memory));
    head_max = std::max(head_max, op_time(2 * double(b.logit_rows) * double(m.vocab * m.hidden) / tp,
                                          double(m.vocab * m.hidden) / tp * wbytes_, compute_, eff.gemm, eff.memory));
    total_tokens += t;
    max_rank_tokens = std::max(max_rank_tokens, t);
    if (b.draft_tokens > 0) {
      const double d = double(b.draft_tokens), share = d / t;
      draft_tokens += d;
      draft_rank_max = std::max(draft_rank_max,
          op_time(b.attention_flops * share / tp, b.kv_tokens_read * share * kvb, hw.attention_type(), eff.attention_compute,
                  eff.attention_memory) +
          op_time(2 * d * (m.attention_params() + shared + 2 * double(m.hidden * m.hidden)) / tp,
                  (m.attention_params() + shared) / tp * wbytes_, compute_, eff.gemm, eff.memory) +
          op_time(2 * d * double(m.vocab * m.hidden) / tp, double(m.vocab * m.hidden) / tp * wbytes_, compute_, eff.gemm, eff.memory));
    }
  }
  StepBreakdown s;
  if (total_tokens == 0) return s;
  const double mb = double(c_.deployment.micro_batches);
  s.overhead = hw.step_overhead_s + double(m.layers) * hw.layer_overhead_s * mb;
  s.dense_layers = double(m.dense_layers) * dense_rank_max;
  const double comm = all_to_all(max_rank_tokens / tp);
  for (double imbalance : imbalance_) {
    const double experts = expert_time(total_tokens, imbalance);
    const double compute = moe_rank_max + experts;
    s.experts += experts;
    s.comm += comm;
    s.moe_layers += std::max(compute, comm) + std::min(compute, comm) * (mb > 1 ? 1 / mb : 1);
  }
  s.lm_head = head_max;
  if (draft_tokens > 0) {
    const double mean_imbalance = imbalance_.empty() ? 1.0 : imbalance_[imbalance_.size() / 2];
    const double experts = m.experts > 0 ? expert_time(draft_tokens, mean_imbalance) : 0;
    s.draft = double(c_.deployment.mtp.draft_tokens) *
            (draft_rank_max + experts + all_to_all(draft_tokens / double(ranks.size()) / tp) + hw.layer_overhead_s);
  }
  s.total = s.dense_layers + s.moe_layers + s.lm_head + s.draft + s.overhead;
  return s;
}

}  // namespace moe::sim
