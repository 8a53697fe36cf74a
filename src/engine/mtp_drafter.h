#pragma once
// Drafts from DeepSeek's MTP layer: after each engine step the layer runs over every
// position whose KV the step kept, fed the main model's final hidden state there and the
// token that follows it, and writes its own KV row for that position, in the engine's KV
// cache's last layer (Model::make_kv_store with_mtp): prefix sharing, preemption, freeing
// and the prefill/decode hand-off treat it as any other layer. Its logits at a sequence's
// last position give the first drafted token; with more than one, the layer is applied
// again to its own output and the token it drafted, as vLLM and SGLang do, one round per
// draft over all sequences at once. Drafts are greedy: the target's verification keeps the
// output exact whatever they are.
//
// A chained round writes a row past the positions a sequence holds blocks for: into the
// sequence's last block where it has room (rows past its length are never read as its
// own: the next step overwrites them), else into scratch blocks, a few per sequence of the
// round, after the engine's blocks (scratch_blocks). In an expert-parallel group every rank
// runs the same rounds after each group step, with no tokens if it has none (idle_rounds),
// since the layer's experts are spread over the group.
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "engine/scheduler.h"
#include "model/kv_store.h"
#include "model/model.h"

namespace moe {

class ThreadPool;

class MtpDrafter : public DraftSource {
 public:
  // Blocks past the engine's own that the drafter needs in the KV cache, for up to
  // max_seqs sequences a step.
  static int32_t scratch_blocks(int32_t num_speculative_tokens, int32_t block_size, int32_t max_seqs);

  // The model must have an MTP layer (Model::n_mtp_layers) and kv its rows; both must
  // outlive the drafter. Block ids from n_blocks on are scratch.
  MtpDrafter(Model& model, KvStore& kv, int32_t num_speculative_tokens, int32_t n_blocks, int32_t max_seqs);

  // The drafts made after the step that produced exactly these tokens, else none.
  std::vector<int32_t> propose(int64_t id, const std::vector<int32_t>& tokens, int32_t max_k) override;

  // Before the scheduler commits the step (on_step_done): hidden holds the main model's
  // hidden states of the step's tokens (want_hidden), emitted what each sampling sequence
  // emitted, and tokens_of a running request's tokens before the step.
  void after_step(const StepPlan& plan, const std::vector<std::vector<int32_t>>& emitted, const float* hidden,
                  const std::function<const std::vector<int32_t>*(int64_t)>& tokens_of, ThreadPool& pool);
  // An expert-parallel rank that had no tokens in a group step: its part in the rounds.
  void idle_rounds(ThreadPool& pool);

  // The drafts that continue a request of n_tokens tokens, made elsewhere (the prefill
  // instance of a hand-off); and the drafts held for a request, whatever they continue.
  void seed(int64_t id, size_t n_tokens, std::vector<int32_t> drafts);
  std::vector<int32_t> drafts(int64_t id) const;
  void forget(int64_t id) { drafts_.erase(id); }

 private:
  struct Drafts {
    size_t n_tokens = 0;  // the length of the tokens they continue
    std::vector<int32_t> tokens;
  };
  struct Chain {
    int64_t id;
    std::vector<int32_t> table;  // the sequence's blocks, then its scratch blocks
    int64_t pos;                 // where the next chained row goes
  };
  // Drafts 2..k of the chains, one round per draft: each round's input is the round
  // before's output, hidden [chains, n_embd].
  void chain(std::vector<Chain>& chains, std::vector<float> hidden, ThreadPool& pool);
  void run(const Step& step, const float* hidden, ThreadPool& pool);

  Model& model_;
  KvStore& kv_;
  int32_t k_;
  int32_t n_blocks_, max_seqs_, scratch_per_seq_;
  std::unordered_map<int64_t, Drafts> drafts_;
  std::vector<float> logits_, hidden_in_, hidden_out_;
};

}  // namespace moe
