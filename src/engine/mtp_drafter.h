#pragma once
// Drafts from DeepSeek's MTP layer: after each engine step the layer runs over every
// position whose KV the step kept, fed the main model's final hidden state there and the
// token that followed it, and writes its own KV row for that position (a store of its own,
// indexed by the same block ids as the main cache, so prefix sharing, preemption and
// freeing need nothing more). Its logits at a sequence's last position give the first
// drafted token; with more than one, the layer is applied again to its own output and the
// token it drafted, as vLLM and SGLang do. Drafts are greedy: the target's verification
// keeps the output exact whatever they are.
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
  // The model must have an MTP layer (Model::n_mtp_layers) and outlive the drafter; the
  // blocks are the engine's KV cache's.
  MtpDrafter(Model& model, int32_t num_speculative_tokens, int32_t block_size, int32_t n_blocks, KvDtype dtype);

  // The drafts made after the step that produced exactly these tokens, else none.
  std::vector<int32_t> propose(int64_t id, const std::vector<int32_t>& tokens, int32_t max_k) override;

  // After the scheduler committed the step (on_step_done): hidden holds the main model's
  // hidden states of the step's tokens (want_hidden), emitted what each sampling sequence
  // emitted, and tokens_of a running request's tokens (null once it has ended).
  void after_step(const StepPlan& plan, const std::vector<std::vector<int32_t>>& emitted, const float* hidden,
                  const std::function<const std::vector<int32_t>*(int64_t)>& tokens_of, ThreadPool& pool);
  void forget(int64_t id) { drafts_.erase(id); }

 private:
  struct Drafts {
    size_t n_tokens = 0;  // the length of the tokens they continue
    std::vector<int32_t> tokens;
  };
  // Drafts 2..k of one sequence, each from the layer's output at the position before.
  void chain(int64_t id, std::vector<int32_t> table, int64_t pos, std::vector<float> h, ThreadPool& pool);

  Model& model_;
  int32_t k_;
  int32_t block_size_, n_blocks_, n_scratch_;
  KvStore kv_;
  std::unordered_map<int64_t, Drafts> drafts_;
  std::vector<float> logits_, hidden_in_, hidden_out_;
};

}  // namespace moe
