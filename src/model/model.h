#pragma once
// A loaded model: config, weights mapped from the GGUF file, and the forward pass of its
// architecture over a step of tokens from one or more sequences.
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "model/gguf.h"
#include "model/kv_store.h"
#include "model/model_config.h"

namespace moe {

class ThreadPool;
class ExpertParallel;
class WeightRegrouper;

// One sequence's share of a step: n_tokens new tokens at positions pos0.. whose KV rows
// are written into (and attention reads from) the blocks of block_table.
// Which of a slice's tokens get a logit row: the output head is the largest matrix of a
// small model, so a prompt chunk that does not end its prompt asks for none.
enum class LogitRows : uint8_t { kLast, kAll, kNone };

struct SeqSlice {
  const std::vector<int32_t>* block_table = nullptr;
  int64_t pos0 = 0;
  int64_t n_tokens = 0;
  LogitRows logits = LogitRows::kLast;
};

struct Step {
  std::vector<int32_t> tokens;  // all sequences' new tokens, slice after slice
  std::vector<SeqSlice> seqs;
  // Keep every token's final hidden state (Model::hidden_states), as the MTP layer needs.
  bool want_hidden = false;
  int64_t n_logit_rows() const;
};

class Model {
 public:
  virtual ~Model() = default;

  // Maps the file, checks metadata and every tensor's shape and type. progress(fraction)
  // is called while weights are read in: all of them, or all but the routed experts' (an
  // expert-parallel rank reads only its own, once it knows which: ExpertParallel).
  static std::unique_ptr<Model> load(const std::string& path, const std::function<void(double)>& progress = {},
                                     bool read_routed_experts = true);
  // The same for a model file already open (a GGUF file, or one assembled from a Hugging
  // Face checkpoint).
  static std::unique_ptr<Model> from_file(std::unique_ptr<GgufFile> file, const std::function<void(double)>& progress = {},
                                          bool read_routed_experts = true);

  const ModelConfig& config() const { return config_; }
  const GgufFile& file() const { return *file_; }

  // Runs the step; writes f32 logits [step.n_logit_rows(), n_vocab] in slice order.
  virtual void forward(const Step& step, KvStore& kv, float* logits, ThreadPool& pool) = 0;

  // Runs the MoE layers' routed experts across an expert-parallel group (null: all here).
  // From then on every rank of the group takes part in every step: forward() when it has
  // tokens, step_idle() when it has none.
  virtual void set_expert_parallel(ExpertParallel* ep) { ep_ = ep; }
  ExpertParallel* expert_parallel() const { return ep_; }
  // Joins the group's next step without tokens of its own; false when no rank had any
  // (nothing ran).
  virtual bool step_idle(ThreadPool& pool) = 0;

  // A KV cache of n_blocks blocks for every layer; with_mtp adds the MTP layer's rows as
  // one more layer (the last), so that they are sized, shared and handed off with the rest.
  KvStore make_kv_store(int64_t block_size, int64_t n_blocks, KvDtype dtype, bool with_mtp = false) const;

  // DeepSeek's multi-token-prediction layer (0 when the file has none), which drafts the
  // token after next from a position's final hidden state and the next token.
  int64_t n_mtp_layers() const { return config_.n_nextn; }
  // After a forward of a step with want_hidden: each of its tokens' hidden state after the
  // final norm, [tokens, n_embd].
  virtual const float* hidden_states() const = 0;
  // The MTP layer over a step: token i at its position goes with hidden row i (the hidden
  // state of the position before, the main model's or this layer's own output), its KV in
  // kv's last layer (make_kv_store with_mtp, the step's block tables). Writes logits as
  // forward() does and, when hidden_out is given, the layer's output per token
  // [tokens, n_embd]. Throws moe::Error without an MTP layer or its KV. In an
  // expert-parallel group the layer's routed experts are spread like the others': every
  // rank calls it the same number of times after each group step, with no tokens if it has
  // none.
  virtual void forward_mtp(const Step& step, const float* hidden, KvStore& kv, float* logits, float* hidden_out,
                           ThreadPool& pool) = 0;
  // Weight bytes read per decoded token (attention, dense and shared FFNs, n_used routed
  // experts per MoE layer, the output head): the numerator of the decode roofline.
  uint64_t active_bytes_per_token() const { return active_bytes_; }
  // Weight bytes the last forward() read: everything a token reads but the routed experts,
  // plus each MoE layer's distinct experts the step's tokens were routed to (here; an
  // expert-parallel rank counts the experts its own tokens chose).
  uint64_t last_step_weight_bytes() const { return last_step_bytes_; }
  // Weights multiplied per token: a token costs about 2 FLOPs per active parameter.
  uint64_t active_params_per_token() const { return active_params_; }
  uint64_t total_weight_bytes() const { return total_bytes_; }
  // Bytes of weights moved at load into memory the model owns (huge pages), and of those
  // the ones regrouped for the AVX-512 kernels (see model/weight_regroup.h).
  uint64_t moved_weight_bytes() const { return moved_bytes_; }
  uint64_t regrouped_weight_bytes() const { return regrouped_bytes_; }
  // The weight matrices one decoded token multiplies with, layer by layer in the order of
  // a step, each MoE layer's routed experts n_used distinct ones drawn with rng: the bytes
  // active_bytes_per_token() counts, where they lie, for measuring how fast they can be
  // read (see kernels/membw.h).
  virtual std::vector<QMatrix> token_matrices(std::mt19937& rng) const = 0;

 protected:
  Model(std::unique_ptr<GgufFile> file, ModelConfig config)
      : file_(std::move(file)), config_(std::move(config)) {}

  // Marks the matrices the forward pass multiplies with to be moved (and regrouped) at
  // load, the routed experts' too when routed_experts.
  virtual void mark_for_regrouping(WeightRegrouper& r, bool routed_experts) = 0;

  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  uint64_t active_bytes_ = 0;
  uint64_t last_step_bytes_ = 0;
  uint64_t active_params_ = 0;
  uint64_t total_bytes_ = 0;
  uint64_t moved_bytes_ = 0;
  uint64_t regrouped_bytes_ = 0;
  ExpertParallel* ep_ = nullptr;
  std::shared_ptr<const void> moved_;  // the memory of the weights moved at load
};

std::unique_ptr<Model> make_deepseek2(std::unique_ptr<GgufFile> file, ModelConfig config);
std::unique_ptr<Model> make_qwen3_moe(std::unique_ptr<GgufFile> file, ModelConfig config);

}  // namespace moe
