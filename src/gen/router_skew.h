#pragma once
// Skewed expert routing for generated models (gen-model --expert-skew and
// --expert-skew-by-token), so that expert placement has something to fix.
//
// Random routers on random hidden states spread tokens evenly over the experts. Real ones
// do not: some experts are hot in every layer, and which ones depends on the text. Both
// edits below are off by default and then touch nothing, so the bytes stay as before.
//
// Popularity (--expert-skew S): each MoE layer ranks its experts by a permutation drawn
// from the seed and shifts the selection score of the expert of rank r by
// -S * beta * ln(r + 1) (centred), beta the Gumbel scale that matches the spread of the
// scores. Top-k selection then behaves like drawing experts without replacement with
// popularity (r + 1)^-S, a Zipf law. DeepSeek-V3 gating carries the shift in
// exp_probs_b.bias, which acts on selection only, as in the real models.
//
// The other gatings (qwen3moe, deepseek2 v2) have no bias, and the normed hidden states of
// a random model have no constant component that a router row could turn into one. So the
// shift goes through a routing channel: a coordinate of the residual stream (one of the
// last) that every token embedding sets to the same large value, that no other matrix
// reads or writes, that the residual norms weigh by 1, and that the router rows weigh by
// shift_e / kappa, kappa its expected value in a normed hidden state (real models have
// such "massive activation" coordinates). A constant component that the other matrices
// did read would reach the routers through them as a random skew of its own.
//
// By prompt (--expert-skew-by-token G): the vocabulary splits into G contiguous ranges and
// each MoE layer's experts into G contiguous groups. Range g's embeddings set routing
// channel g, which makes it their mean embedding's one large coordinate, and the router
// rows of group g's experts weight that channel by a few logit standard deviations: a token
// of range g mostly picks experts of group g, whatever the gating.
#include <cstdint>
#include <vector>

namespace moe {

struct GenSpec;

// Fails with a message naming the gen-model option for an out-of-range value.
void check_router_skew(const GenSpec& spec);

class RouterSkew {
 public:
  explicit RouterSkew(const GenSpec& spec);

  bool active() const { return skew_ > 0.0f || groups_ > 0; }
  // The edits, one row of a tensor at a time; rows as gen_model makes them.
  void edit_embedding_row(int64_t token, float* row) const;
  void edit_router_row(int64_t layer, int64_t expert, float* row) const;
  void edit_bias(int64_t layer, float* bias) const;
  // A row of a matrix that reads the residual stream (its n_embd inputs) stops reading the
  // routing channels; a row that writes residual coordinate `coord` is zeroed on a channel.
  void edit_reader_row(float* row) const;
  // The weight of an RMS norm over the residual stream: 1 on the channels, so that a router
  // reads a channel as its value over the rms.
  void edit_norm_row(float* row) const;
  void edit_writer_row(int64_t coord, float* row, int64_t n) const;

 private:
  int64_t range_of(int64_t token) const { return token * groups_ / n_vocab_; }
  int64_t group_of(int64_t expert) const { return expert * groups_ / n_experts_; }
  int64_t n_channels() const { return (shared_channel_ ? 1 : 0) + groups_; }
  // The residual coordinates used as channels: the last ones, the popularity channel first.
  int64_t first_channel() const { return n_embd_ - n_channels(); }
  int64_t group_channel(int64_t g) const { return n_embd_ - groups_ + g; }

  float skew_;
  int64_t groups_;
  int64_t n_embd_, n_vocab_, n_experts_;
  bool via_bias_;        // the popularity shift goes to exp_probs_b
  bool shared_channel_;  // the popularity shift goes through a routing channel
  std::vector<std::vector<float>> shift_;  // [layer][expert] selection-score shift
  float channel_value_ = 0.0f;             // a set channel's value in a token embedding
  float kappa_ = 1.0f;                     // the expected value of a set channel in h
};

}  // namespace moe
