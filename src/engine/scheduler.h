#pragma once
// The continuous-batching scheduler: which requests run in the next engine step, and how
// many of their tokens. Pure bookkeeping on top of a BlockManager (no model, no threads);
// the engine thread owns one instance.
//
// One step is: plan = schedule(); run the model on the plan; on_step_done(plan, sampled).
// schedule() already reserves the KV blocks the plan writes into (the plan carries block
// tables, so the blocks must exist), admits waiting requests and preempts running ones;
// on_step_done() is the one call that commits what the step computed: positions written,
// sampled tokens appended, full blocks registered in the prefix cache, finished requests
// released. Exactly one on_step_done must follow each schedule().
//
// Order inside a step, so decodes are never starved by prefills:
//   1. every running request whose prompt is done decodes one token;
//   2. running requests still prefilling get the next chunk of their prompt;
//   3. waiting requests are admitted (FCFS, or by (priority, arrival)) while blocks allow.
// max_num_batched_tokens must be >= max_num_seqs, so step 1 always fits the budget.
//
// Prefill/decode disaggregation adds two kinds of request. A keep_blocks request (on a
// prefill instance) that ends by reaching max_tokens keeps its blocks allocated under its
// id; the caller frees them (BlockManager::free) once the KV has been pulled. A
// remote-KV request (on a decode instance) is admitted like any other, its blocks
// allocated with prefix-cache hits, but then waits in running without being scheduled
// until kv_loaded(): the caller fills its blocks from elsewhere meanwhile. It is never
// chosen as a preemption victim (its blocks are being written), and if the load fails it
// falls back to recomputing its prompt.
//
// Speculative decoding: with num_speculative_tokens k > 0 and a DraftSource, a decoding
// request's step also carries up to k drafted tokens after its last one, placed after every
// decode is in the plan (so drafts never crowd a decode out) and before prompt chunks; a
// draft never preempts anything, it shrinks to what the budget and the free blocks allow.
// The step's logits verify them, and on_step_done takes the tokens the step emitted (the
// accepted drafts, then one more): positions of rejected drafts are given back to the
// block pool at once.
//
// Preemption is by recompute: a victim's blocks are freed and its prompt + generated tokens
// become its new prompt, so when it is re-admitted its prefill (mostly a prefix-cache hit
// if its blocks were not evicted yet) ends with exactly the state it had.
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/block_manager.h"
#include "engine/draft_length.h"

namespace moe {

// The most logit rows a prompt_logits request's prefill chunk produces in one step (with a
// 129k vocabulary, 256 rows are 132 MB of f32 logits).
inline constexpr int64_t kMaxPromptLogitRows = 256;

struct SchedulerConfig {
  int64_t max_num_batched_tokens = 2048;
  int32_t max_num_seqs = 64;
  // Fraction of all blocks admission leaves free for running sequences to grow into.
  double watermark = 0.01;
  enum class Policy { kFcfs, kPriority } policy = Policy::kFcfs;
  // Drafted tokens a decoding request may verify per step (see the header comment).
  int32_t num_speculative_tokens = 0;
  // Each request's draft length follows its acceptance (engine/draft_length.h), up to
  // num_speculative_tokens; false: always num_speculative_tokens where they fit.
  bool adaptive_drafts = true;
};

// Proposes the tokens that may follow a running request's tokens (prompt and output so far),
// at most max_k of them; fewer or none when it has no guess.
class DraftSource {
 public:
  virtual ~DraftSource() = default;
  virtual std::vector<int32_t> propose(int64_t id, const std::vector<int32_t>& tokens, int32_t max_k) = 0;
};

struct Request {
  int64_t id = 0;
  std::vector<int32_t> prompt;
  int64_t max_tokens = 16;
  int32_t priority = 0;  // lower is more urgent; only the kPriority policy looks at it
  // Every prompt position's logits are wanted (prompt logprobs): the prompt is prefilled
  // without prefix-cache hits and its chunks produce all their rows.
  bool prompt_logits = false;
  // Ending by max_tokens leaves the blocks allocated (see the header comment).
  bool keep_blocks = false;
  // The prompt's KV comes from another instance, which also sampled this first output
  // token; -1: an ordinary request.
  int32_t remote_first_token = -1;
};

enum class RequestState { kWaiting, kRunning, kFinished };
enum class FinishReason { kNone, kLength, kStopped, kAborted, kRejected };

// One sequence's part of a step.
struct ScheduledSeq {
  int64_t id = 0;
  std::vector<int32_t> block_table;  // a copy: valid however the manager changes later
  int64_t pos0 = 0;
  int64_t n_tokens = 0;
  std::vector<int32_t> tokens;  // the n_tokens token ids fed at pos0..
  bool produces_logits = false;  // last token's logits are sampled (prompt end or decode)
  // A chunk of a prompt_logits request's first prefill: a logit row for every token (the
  // last one is the sampled row when produces_logits).
  bool all_logits = false;
  // A decode's drafted tokens: the last n_draft of tokens, each with a logit row too.
  int32_t n_draft = 0;
  // Logit rows this sequence has in the step's output.
  int64_t n_logit_rows() const { return all_logits ? n_tokens : (produces_logits ? 1 + n_draft : 0); }
};

// A remote-KV request admitted by this schedule(): its blocks, to be filled from n_cached.
struct KvLoad {
  int64_t id = 0;
  std::vector<int32_t> block_table;
  int64_t n_cached = 0;
};

struct StepPlan {
  std::vector<ScheduledSeq> seqs;
  std::vector<KvLoad> kv_loads;
  std::vector<int64_t> preempted;  // requests moved back to waiting during this schedule()
  int64_t n_batched_tokens = 0;
  // Nothing for the model to run (kv_loads may still be there).
  bool empty() const { return seqs.empty(); }
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, BlockManager& blocks);

  // Queues a request. Returns false, and records it as finished with kRejected and a
  // reason, when it can never run: empty prompt, max_tokens < 1, a duplicate id, or more
  // positions than the whole KV cache holds (it could not even run alone).
  bool add(Request request);

  // Drafts come from `source` (null: none) when num_speculative_tokens > 0. The source must
  // outlive its use.
  void set_draft_source(DraftSource* source) { drafts_ = source; }

  StepPlan schedule();
  // emitted: per plan sequence with produces_logits, in plan order, the tokens its step
  // emitted: its first n accepted drafts (equal to them) and then one token, 1 + n in all
  // with n <= n_draft. Returns the requests that finished by reaching max_tokens.
  std::vector<int64_t> on_step_done(const StepPlan& plan, const std::vector<std::vector<int32_t>>& emitted);
  // The same for a step without drafts: one token per sampling sequence.
  std::vector<int64_t> on_step_done(const StepPlan& plan, const std::vector<int32_t>& sampled);

  // The caller saw a stop condition (EOS, stop string): the request ends and its blocks
  // are released. Unknown or already finished: no-op.
  void finish(int64_t id) { end(id, FinishReason::kStopped); }
  // Cancels a waiting or running request; its blocks are released at once.
  void abort(int64_t id) { end(id, FinishReason::kAborted); }

  // A remote-KV request's blocks are filled (ok): it decodes its first token next step.
  // Not ok: it recomputes, prompt and first token, as a preempted request does. A request
  // not waiting for its KV: no-op.
  void kv_loaded(int64_t id, bool ok);

  // Drops a finished request's record (its output, reason); the engine calls it once the
  // final output is delivered, so a long-running server does not accumulate them.
  // Unknown or unfinished: no-op.
  void forget(int64_t id);

  RequestState state(int64_t id) const;
  FinishReason finish_reason(int64_t id) const;
  const std::string& reject_reason(int64_t id) const;
  // A running request's tokens, prompt and generated; null when it is not running.
  const std::vector<int32_t>* running_tokens(int64_t id) const {
    const auto it = seqs_.find(id);
    return it == seqs_.end() || it->second.state != RequestState::kRunning ? nullptr : &it->second.tokens;
  }
  // Tokens generated so far (kept across preemptions).
  std::vector<int32_t> output(int64_t id) const;
  int64_t n_preemptions(int64_t id) const;

  size_t n_waiting() const { return waiting_.size(); }
  size_t n_running() const { return running_.size(); }
  bool has_unfinished() const { return !waiting_.empty() || !running_.empty(); }
  // Running requests waiting for their KV from elsewhere.
  size_t n_awaiting_kv() const { return n_awaiting_kv_; }
  const std::vector<int64_t>& running() const { return running_; }
  const std::deque<int64_t>& waiting() const { return waiting_; }

 private:
  struct Seq {
    Request req;
    int64_t arrival = 0;
    RequestState state = RequestState::kWaiting;
    FinishReason reason = FinishReason::kNone;
    std::string reject_reason;
    std::vector<int32_t> tokens;  // prompt, then generated tokens
    int64_t n_prompt = 0;         // tokens to prefill (grows to include output on preemption)
    int64_t n_computed = 0;       // positions whose KV is written (or scheduled this step)
    int64_t n_generated = 0;
    int64_t n_preempted = 0;
    bool awaiting_kv = false;  // admitted remote-KV request, blocks not filled yet
    DraftLength draft_length;
  };

  const Seq& get(int64_t id) const;
  // Orders running_ and victim choice: most urgent first.
  bool more_urgent(const Seq& a, const Seq& b) const;
  void insert_running(int64_t id);
  void remove_running(int64_t id);
  // Frees a running request's blocks and puts it at the front of waiting.
  void preempt(int64_t id, StepPlan& plan);
  // Moves a running request back to the front of waiting, everything known so far as its
  // new prompt; its blocks must be freed already.
  void requeue_for_recompute(int64_t id);
  // The least urgent running request that may be preempted (one not waiting for its KV).
  int64_t pick_victim() const;
  void end(int64_t id, FinishReason reason, bool keep_blocks = false);
  // Registers the sequence's full blocks of written positions in the prefix cache.
  void commit_written(const Seq& s);
  void add_to_plan(Seq& s, int64_t n_tokens, StepPlan& plan);
  // Step 1 and 2 and 3 of the header comment; each consumes budget.
  void schedule_decodes(StepPlan& plan, int64_t& budget);
  // Extends the plan's decodes (all of it so far) with drafts, within budget and blocks.
  void schedule_drafts(StepPlan& plan, int64_t& budget);
  // A prompt_logits request's first prefill: no prefix-cache hits, every logit row. After a
  // preemption the recomputed prompt's logits were already reported.
  static bool wants_all_logits(const Seq& s) { return s.req.prompt_logits && s.n_generated == 0; }
  // Prompt tokens the sequence's next chunk takes within the step's token budget.
  static int64_t chunk_size(const Seq& s, int64_t budget);
  void schedule_prefills(StepPlan& plan, int64_t& budget);
  void schedule_admissions(StepPlan& plan, int64_t& budget);
  // Index in waiting_ of the next request to admit.
  size_t next_waiting() const;

  SchedulerConfig config_;
  BlockManager& blocks_;
  std::unordered_map<int64_t, Seq> seqs_;
  std::vector<int64_t> running_;  // most urgent first
  std::deque<int64_t> waiting_;
  int64_t next_arrival_ = 0;
  size_t n_awaiting_kv_ = 0;
  bool step_pending_ = false;
  DraftSource* drafts_ = nullptr;
};

}  // namespace moe
