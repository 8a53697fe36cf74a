#pragma once
// The engine step, single-threaded: schedule() -> run the model -> postprocess(). It joins
// the scheduler (which requests and tokens), the model (one forward over the batch), the
// per-request samplers and the streaming detokenizers, and reports each request's progress
// to its sink. No threads and no clock of its own beyond timestamps: AsyncEngine runs it on
// the engine thread, tests call step() directly to control exactly what is batched.
#include <cstdint>
#include <chrono>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/block_manager.h"
#include "engine/lease_book.h"
#include "engine/metrics.h"
#include "engine/mtp_drafter.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/speculative.h"
#include "model/model.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace moe {

class ThreadPool;

struct EngineConfig {
  SchedulerConfig scheduler;
  int32_t block_size = 16;
  int32_t n_blocks = 0;        // KV cache blocks; see kv_blocks_for_memory
  KvDtype kv_dtype = kKvDtypeAuto;  // how the cache stores its rows
  int64_t max_model_len = 0;   // longest prompt + max_tokens; 0: the model's context length
  // How long a prefill instance holds a handed-off prompt's blocks for the decode
  // instance to pull before it frees them.
  std::chrono::milliseconds kv_lease{30000};
  // Drafted tokens each decode step verifies (docs/speculative.md); the drafter comes from
  // make_drafter, or set_drafter.
  SpeculativeConfig speculative;
};


// KV blocks of block_size positions that fit in `gib` GiB for this model, stored as dtype,
// with the MTP layer's rows too when they are kept (drafting with it, speculative_uses_mtp).
int32_t kv_blocks_for_memory(const Model& model, double gib, int32_t block_size, KvDtype dtype, bool with_mtp = false);

// An engine for a single request of n_prompt tokens and max_tokens more: blocks for it and
// its drafts, one sequence, a budget that takes the prompt in one step (generate and bench
// model run one request through the serving engine this way).
EngineConfig one_request_config(int64_t n_prompt, int64_t max_tokens, KvDtype dtype, const SpeculativeConfig& spec);

// The limits a request is checked against before it is queued.
struct RequestLimits {
  int64_t n_vocab = 0;
  int64_t max_model_len = 0;
  int64_t kv_capacity_tokens = 0;  // positions the whole KV cache holds
};

// Throws RequestError naming the field when the request can never run: empty prompt, a
// token id outside the vocabulary, max_tokens < 1, prompt + max_tokens over max_model_len
// or over the KV cache, bad sampling params, a stop_token_id or logit_bias token outside
// the vocabulary, prompt_logprobs out of range.
void validate_request(const std::vector<int32_t>& prompt, const GenerateParams& params, const RequestLimits& limits);

class EngineCore {
 public:
  // The model, tokenizer and pool must outlive the core. Allocates the KV cache.
  EngineCore(Model& model, const Tokenizer& tokenizer, EngineConfig config, ThreadPool& pool);
  ~EngineCore();

  const EngineConfig& config() const { return config_; }
  // Replaces the drafter config().speculative made (null: no drafts); for drafters that are
  // not a configuration, such as a benchmark's of known acceptance.
  void set_drafter(std::unique_ptr<DraftSource> drafter);
  // Puts a drafter around the current one (which it then owns): the engine goes on feeding
  // an MTP drafter its steps, and the wrapper decides what is proposed.
  void wrap_drafter(const std::function<std::unique_ptr<DraftSource>(std::unique_ptr<DraftSource>)>& wrap);
  const RequestLimits& limits() const { return limits_; }

  // Queues a request under the caller's id (unique among unfinished ones). Throws
  // RequestError as validate_request does. The sink receives every RequestOutput.
  void add(int64_t id, std::vector<int32_t> prompt, GenerateParams params, OutputSink sink,
           Clock::time_point arrival = Clock::now());
  // Queues the decode half of a prefill/decode pair: the prompt's KV comes from another
  // instance, which sampled first_token from it with the same params. The sink's first
  // output carries the blocks to fill (RequestOutput::kv); then kv_loaded() says whether
  // they were. Outputs continue after first_token exactly as a request that had generated
  // it here would. Throws RequestError as add() does, and when max_tokens leaves nothing
  // to generate after first_token. draft_tokens: what the other instance's MTP layer
  // drafted after first_token (KvBlocks::draft_tokens), verified by the first step here when
  // this engine drafts with it too; ignored otherwise.
  void add_remote(int64_t id, std::vector<int32_t> prompt, int32_t first_token, GenerateParams params, OutputSink sink,
                  Clock::time_point arrival = Clock::now(), std::vector<int32_t> draft_tokens = {});
  // The remote KV of an add_remote request has landed in its blocks (ok), or could not be
  // loaded: then the request recomputes its prompt itself. Unknown ids are ignored.
  void kv_loaded(int64_t id, bool ok);

  // Releases a handed-off prompt's lease (named by the hand-off output's id) and frees its
  // blocks now. Other threads release through leases() instead; end_leases frees theirs.
  LeaseRelease release_lease(int64_t id);
  // Frees the blocks of every lease released, or run out by `now`.
  void end_leases(Clock::time_point now);
  // Thread-safe.
  LeaseBook& leases() { return leases_; }
  std::optional<Clock::time_point> next_lease_expiry() const { return leases_.next_expiry(); }
  size_t n_leases() const { return leases_.n_held(); }

  // Ends a waiting or running request now: its blocks are freed and its sink gets a final
  // output with FinishKind::kAbort. Unknown or finished ids are ignored.
  void abort(int64_t id);
  // Aborts every unfinished request, as abort() does.
  void abort_all();

  bool has_work() const { return scheduler_.has_unfinished(); }
  bool in_expert_parallel_group() const { return model_.expert_parallel() != nullptr; }
  // One engine step. Returns false when it found nothing to do: then nothing changes
  // until a request is added, aborted or loaded, or a lease is released or expires.
  // In an expert-parallel group (Model::expert_parallel) it is one step of the group, which
  // every rank must take in turn: with no batch of its own, this rank computes its experts'
  // share of the others' batches, and the result is true when any rank had work.
  bool step();

  size_t n_running() const { return scheduler_.n_running(); }
  size_t n_waiting() const { return scheduler_.n_waiting(); }
  const BlockManager& blocks() const { return blocks_; }
  // KV events (docs/kv_events.md): log prefix-index changes from now on, and take those
  // logged so far.
  void record_kv_events() { blocks_.record_events(); }
  std::vector<kv_events::KvEvent> take_kv_events() { return blocks_.take_events(); }
  // The KV pool, for the transfers of a prefill/decode pair.
  KvStore& kv() { return kv_; }
  // Gauges are refreshed by each step() and abort().
  const EngineMetrics& metrics() const { return metrics_; }
  // Preemptions of one unfinished request so far (for tests); 0 when unknown.
  int64_t n_preemptions(int64_t id) const;

 private:
  struct Active;  // one unfinished request's sampler, decoders and timestamps

  // This instance's own step; ran_model tells whether it ran a batch through the model.
  bool step_here(bool& ran_model);
  void run_model(const StepPlan& plan);
  // Prompt logprobs from an all-logits chunk's rows (one per token of the chunk).
  void collect_prompt_logprobs(Active& a, const ScheduledSeq& s, const float* rows);
  // The tokens a sequence's step emits from its logit rows: each draft the sampler accepts,
  // then one token of its own (see Sampler::verify).
  std::vector<SampleResult> verify_and_sample(Active& a, const ScheduledSeq& s, const float* rows);
  void postprocess(const StepPlan& plan, const std::vector<std::vector<SampleResult>>& results, Clock::time_point now);
  // Appends one token to a request's output; true when it ends the request. The token is
  // number i_in_step of the n_in_step the request emitted in the step that ended at now.
  bool emit_token(Active& a, const SampleResult& r, RequestOutput& out, Clock::time_point now, size_t i_in_step,
                  size_t n_in_step);
  // flush: what the decoders hold back is final text (not so for a hand-off, whose decode
  // instance continues it).
  void finish(int64_t id, Active& a, RequestOutput& out, FinishKind kind, Clock::time_point now, bool flush = true);
  // The first token of a remote_decode request is out and did not stop it: its blocks go
  // under a lease and its final output says where they are.
  void hand_off(int64_t id, Active& a, RequestOutput& out, Clock::time_point now);
  // A request's first scheduling: its queue time, prompt tokens and prefix-cache hits.
  void mark_scheduled(Active& a, int64_t n_cached, Clock::time_point now);
  // Tells the remote-KV requests admitted by this plan where to put their KV.
  void announce_kv_loads(const StepPlan& plan);
  void refresh_gauges();

  Model& model_;
  const Tokenizer& tok_;
  EngineConfig config_;
  ThreadPool& pool_;
  RequestLimits limits_;
  KvStore kv_;
  BlockManager blocks_;
  Scheduler scheduler_;
  std::unordered_map<int64_t, std::unique_ptr<Active>> active_;
  LeaseBook leases_;
  std::unique_ptr<DraftSource> drafter_;
  MtpDrafter* mtp_ = nullptr;  // drafter_, when it is the model's MTP layer
  std::vector<float> logits_;  // f32 [rows, n_vocab] of the current step
  EngineMetrics metrics_;
  uint64_t seen_prefix_queries_ = 0, seen_prefix_hits_ = 0;
};

}  // namespace moe
