#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace moe {

Scheduler::Scheduler(SchedulerConfig config, BlockManager& blocks)
    : config_(config), blocks_(blocks) {
  if (config_.max_num_seqs < 1) throw std::invalid_argument("max_num_seqs must be >= 1");
  // Every running request may decode in the same step; a smaller budget would have to
  // leave some of them out, and a decode that waits is a stalled stream.
  if (config_.max_num_batched_tokens < config_.max_num_seqs)
    throw std::invalid_argument("max_num_batched_tokens must be >= max_num_seqs");
  if (!(config_.watermark >= 0.0 && config_.watermark < 1.0))
    throw std::invalid_argument("watermark must be in [0, 1)");
}

bool Scheduler::add(Request request) {
  const int64_t id = request.id;
  if (seqs_.count(id)) {
    // Keep the existing record intact; a duplicate id is the caller's bug.
    return false;
  }
  Seq s;
  s.arrival = next_arrival_++;
  s.tokens = request.prompt;
  s.n_prompt = int64_t(request.prompt.size());
  std::string why;
  if (request.prompt.empty()) {
    why = "empty prompt";
  } else if (request.max_tokens < 1) {
    why = "max_tokens must be >= 1";
  } else if (blocks_.blocks_for(s.n_prompt + request.max_tokens) > blocks_.n_blocks()) {
    // Checked against the whole cache so that a request, once alone, always fits: this is
    // what makes "preempt the others" always end with progress instead of a deadlock.
    why = "prompt (" + std::to_string(s.n_prompt) + " tokens) + max_tokens (" +
          std::to_string(request.max_tokens) + ") needs " +
          std::to_string(blocks_.blocks_for(s.n_prompt + request.max_tokens)) +
          " KV blocks, the cache has " + std::to_string(blocks_.n_blocks());
  }
  s.req = std::move(request);
  if (!why.empty()) {
    s.state = RequestState::kFinished;
    s.reason = FinishReason::kRejected;
    s.reject_reason = why;
    seqs_.emplace(id, std::move(s));
    return false;
  }
  seqs_.emplace(id, std::move(s));
  waiting_.push_back(id);
  return true;
}

const Scheduler::Seq& Scheduler::get(int64_t id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) throw std::out_of_range("unknown request " + std::to_string(id));
  return it->second;
}

void Scheduler::forget(int64_t id) {
  auto it = seqs_.find(id);
  if (it != seqs_.end() && it->second.state == RequestState::kFinished) seqs_.erase(it);
}

RequestState Scheduler::state(int64_t id) const { return get(id).state; }
FinishReason Scheduler::finish_reason(int64_t id) const { return get(id).reason; }
const std::string& Scheduler::reject_reason(int64_t id) const { return get(id).reject_reason; }
int64_t Scheduler::n_preemptions(int64_t id) const { return get(id).n_preempted; }

std::vector<int32_t> Scheduler::output(int64_t id) const {
  const Seq& s = get(id);
  const size_t n_orig = s.req.prompt.size();
  return std::vector<int32_t>(s.tokens.begin() + std::ptrdiff_t(n_orig), s.tokens.end());
}

bool Scheduler::more_urgent(const Seq& a, const Seq& b) const {
  if (config_.policy == SchedulerConfig::Policy::kPriority && a.req.priority != b.req.priority)
    return a.req.priority < b.req.priority;
  return a.arrival < b.arrival;
}

void Scheduler::insert_running(int64_t id) {
  auto pos = std::upper_bound(running_.begin(), running_.end(), id, [&](int64_t a, int64_t b) {
    return more_urgent(seqs_.at(a), seqs_.at(b));
  });
  running_.insert(pos, id);
}

void Scheduler::remove_running(int64_t id) {
  running_.erase(std::find(running_.begin(), running_.end(), id));
}

void Scheduler::requeue_for_recompute(int64_t id) {
  Seq& s = seqs_.at(id);
  remove_running(id);
  // Everything known so far is the new prompt: re-prefilling it reproduces the KV, and
  // its last token's logits give the next output token, so generation resumes exactly.
  s.n_prompt = int64_t(s.tokens.size());
  s.n_computed = 0;
  s.state = RequestState::kWaiting;
  waiting_.push_front(id);
}

void Scheduler::preempt(int64_t id, StepPlan& plan) {
  blocks_.free(id);
  requeue_for_recompute(id);
  ++seqs_.at(id).n_preempted;
  plan.preempted.push_back(id);
}

int64_t Scheduler::pick_victim() const {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    if (!seqs_.at(*it).awaiting_kv) return *it;
  }
  throw std::logic_error("pick_victim: every running request is waiting for its KV");
}

void Scheduler::kv_loaded(int64_t id, bool ok) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || !it->second.awaiting_kv) return;
  Seq& s = it->second;
  s.awaiting_kv = false;
  --n_awaiting_kv_;
  if (ok) {
    s.n_computed = s.n_prompt;
    blocks_.commit_full_blocks(id, s.tokens);
  } else {
    blocks_.free(id);
  }
  s.tokens.push_back(s.req.remote_first_token);
  ++s.n_generated;
  if (!ok) requeue_for_recompute(id);
}

void Scheduler::end(int64_t id, FinishReason reason, bool keep_blocks) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || it->second.state == RequestState::kFinished) return;
  Seq& s = it->second;
  if (s.state == RequestState::kRunning) {
    remove_running(id);
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
  }
  if (s.awaiting_kv) {
    s.awaiting_kv = false;
    --n_awaiting_kv_;
  }
  if (!keep_blocks) blocks_.free(id);
  s.state = RequestState::kFinished;
  s.reason = reason;
}

void Scheduler::add_to_plan(Seq& s, int64_t n_tokens, StepPlan& plan) {
  ScheduledSeq out;
  out.id = s.req.id;
  out.block_table = blocks_.table(s.req.id);
  out.pos0 = s.n_computed;
  out.n_tokens = n_tokens;
  out.tokens.assign(s.tokens.begin() + std::ptrdiff_t(s.n_computed),
                    s.tokens.begin() + std::ptrdiff_t(s.n_computed + n_tokens));
  // A decode always samples; a prompt chunk only when it reaches the prompt's end.
  out.produces_logits = s.n_computed + n_tokens >= s.n_prompt;
  out.all_logits = wants_all_logits(s);
  plan.n_batched_tokens += n_tokens;
  plan.seqs.push_back(std::move(out));
}

void Scheduler::schedule_decodes(StepPlan& plan, int64_t& budget) {
  // running_ is most urgent first and only grows at admission (after this), so the
  // sequences before index i are the ones already in the plan; the victim is always the
  // least urgent one not yet scheduled, which may be the current sequence itself.
  size_t i = 0;
  while (i < running_.size()) {
    const int64_t id = running_[i];
    Seq& s = seqs_.at(id);
    if (s.n_computed < s.n_prompt || s.awaiting_kv) {  // still prefilling (step 2), or loading
      ++i;
      continue;
    }
    bool self_preempted = false;
    while (blocks_.num_tokens(id) < s.n_computed + 1 && !blocks_.append(id, 1)) {
      const int64_t victim = pick_victim();
      preempt(victim, plan);
      if (victim == id) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // everything after i was preempted before it
    add_to_plan(s, 1, plan);
    --budget;
    ++i;
  }
}

void Scheduler::schedule_drafts(StepPlan& plan, int64_t& budget) {
  if (!drafts_ || config_.num_speculative_tokens <= 0) return;
  const int64_t n_decoding = int64_t(plan.seqs.size());  // decodes only: prefills come after
  for (ScheduledSeq& p : plan.seqs) {
    if (budget <= 0) return;
    Seq& s = seqs_.at(p.id);
    // A step emits up to 1 + k tokens: never more than max_tokens leaves.
    const int64_t left = s.req.max_tokens - s.n_generated - 1;
    int64_t k = std::min<int64_t>({config_.num_speculative_tokens, left, budget});
    if (k <= 0) continue;
    if (config_.adaptive_drafts) k = s.draft_length.choose(int32_t(k), n_decoding);
    if (k <= 0) continue;
    std::vector<int32_t> d = drafts_->propose(p.id, s.tokens, int32_t(k));
    k = std::min<int64_t>(k, int64_t(d.size()));
    while (k > 0 && !blocks_.append(p.id, k)) --k;
    if (k == 0) continue;
    p.tokens.insert(p.tokens.end(), d.begin(), d.begin() + std::ptrdiff_t(k));
    p.n_tokens += k;
    p.n_draft = int32_t(k);
    p.block_table = blocks_.table(p.id);
    plan.n_batched_tokens += k;
    budget -= k;
  }
}

int64_t Scheduler::chunk_size(const Seq& s, int64_t budget) {
  const int64_t n = std::min(budget, s.n_prompt - s.n_computed);
  // An all-logits chunk returns a vocabulary-wide row per token; bound what one step holds.
  return wants_all_logits(s) ? std::min(n, kMaxPromptLogitRows) : n;
}

void Scheduler::schedule_prefills(StepPlan& plan, int64_t& budget) {
  for (int64_t id : running_) {
    if (budget <= 0) return;
    Seq& s = seqs_.at(id);
    if (s.n_computed >= s.n_prompt || s.awaiting_kv) continue;  // decoding (step 1), or loading
    // Admission reserved blocks for the whole prompt, so a chunk never needs blocks.
    const int64_t n = chunk_size(s, budget);
    add_to_plan(s, n, plan);
    budget -= n;
  }
}

size_t Scheduler::next_waiting() const {
  if (config_.policy == SchedulerConfig::Policy::kFcfs) return 0;
  size_t best = 0;
  for (size_t i = 1; i < waiting_.size(); ++i)
    if (more_urgent(seqs_.at(waiting_[i]), seqs_.at(waiting_[best]))) best = i;
  return best;
}

void Scheduler::schedule_admissions(StepPlan& plan, int64_t& budget) {
  const int32_t watermark_blocks =
      int32_t(std::ceil(config_.watermark * double(blocks_.n_blocks())));
  // A request preempted in this very step waits for the next one: re-admitting it now
  // would just take back the blocks its preemption freed for the decodes.
  while (budget > 0 && !waiting_.empty() &&
         int64_t(running_.size()) < config_.max_num_seqs) {
    const size_t w = next_waiting();
    const int64_t id = waiting_[w];
    if (std::find(plan.preempted.begin(), plan.preempted.end(), id) != plan.preempted.end())
      return;
    Seq& s = seqs_.at(id);
    // Cached positions produce no logits, so a request that wants every prompt position's
    // logits prefills its first prompt whole.
    const bool whole = wants_all_logits(s);
    const int32_t need = whole ? blocks_.blocks_for(s.n_prompt) : blocks_.blocks_needed(s.tokens);
    // With nothing running, the watermark would only keep a large request out forever.
    const int32_t headroom = running_.empty() ? 0 : watermark_blocks;
    // Head-of-line blocking is deliberate: skipping to a smaller request would starve
    // large ones under steady load.
    if (need + headroom > blocks_.n_available()) return;
    std::vector<int32_t> prompt(s.tokens.begin(), s.tokens.begin() + std::ptrdiff_t(s.n_prompt));
    const std::optional<int64_t> cached =
        whole ? (blocks_.append(id, s.n_prompt) ? std::optional<int64_t>(0) : std::nullopt) : blocks_.allocate_with_prefix(id, prompt);
    if (!cached) return;  // cannot happen after the checks above; stay safe anyway
    waiting_.erase(waiting_.begin() + std::ptrdiff_t(w));
    s.state = RequestState::kRunning;
    s.n_computed = *cached;
    insert_running(id);
    if (s.req.remote_first_token >= 0 && s.n_generated == 0) {
      s.awaiting_kv = true;
      ++n_awaiting_kv_;
      plan.kv_loads.push_back(KvLoad{id, blocks_.table(id), s.n_computed});
      continue;
    }
    const int64_t n = chunk_size(s, budget);
    add_to_plan(s, n, plan);
    budget -= n;
  }
}

StepPlan Scheduler::schedule() {
  if (step_pending_) throw std::logic_error("schedule() called twice without on_step_done()");
  StepPlan plan;
  int64_t budget = config_.max_num_batched_tokens;
  schedule_decodes(plan, budget);
  schedule_drafts(plan, budget);
  schedule_prefills(plan, budget);
  schedule_admissions(plan, budget);
  // Positions are counted as computed when the step commits; until then the plan's pos0s
  // are what tells the next schedule() apart (it cannot run before on_step_done).
  step_pending_ = !plan.empty();
  return plan;
}

std::vector<int64_t> Scheduler::on_step_done(const StepPlan& plan, const std::vector<int32_t>& sampled) {
  std::vector<std::vector<int32_t>> emitted;
  emitted.reserve(sampled.size());
  for (int32_t t : sampled) emitted.push_back({t});
  return on_step_done(plan, emitted);
}

std::vector<int64_t> Scheduler::on_step_done(const StepPlan& plan,
                                             const std::vector<std::vector<int32_t>>& emitted) {
  if (!step_pending_ && !plan.empty())
    throw std::logic_error("on_step_done() without a pending schedule()");
  size_t n_sampling = 0;
  for (const ScheduledSeq& p : plan.seqs) n_sampling += p.produces_logits ? 1 : 0;
  if (emitted.size() != n_sampling)
    throw std::invalid_argument("on_step_done: " + std::to_string(emitted.size()) +
                                " sampled token runs for " + std::to_string(n_sampling) +
                                " sampling sequences");
  size_t k = 0;
  for (const ScheduledSeq& p : plan.seqs) {
    if (!p.produces_logits) continue;
    const std::vector<int32_t>& e = emitted[k++];
    // The KV of every emitted token but the last was written by this step as a draft.
    const size_t n_drafted = size_t(p.n_draft);
    if (e.empty() || e.size() > 1 + n_drafted ||
        !std::equal(e.begin(), e.end() - 1, p.tokens.end() - std::ptrdiff_t(n_drafted)))
      throw std::invalid_argument("on_step_done: request " + std::to_string(p.id) +
                                  " emitted tokens that are not its accepted drafts and one more");
  }
  step_pending_ = false;
  std::vector<int64_t> finished;
  k = 0;
  for (const ScheduledSeq& p : plan.seqs) {
    static const std::vector<int32_t> kNothing;
    const std::vector<int32_t>& e = p.produces_logits ? emitted[k++] : kNothing;
    Seq& s = seqs_.at(p.id);
    // Aborted or stopped between schedule() and now: its result is dropped.
    if (s.state != RequestState::kRunning || s.n_computed != p.pos0) continue;
    // Positions whose KV holds the sequence's tokens: the chunk, less its rejected drafts.
    const int64_t n_valid = p.n_tokens - (e.empty() ? 0 : p.n_draft - int64_t(e.size() - 1));
    const int64_t bs = blocks_.block_size();
    const bool crosses_block = (p.pos0 + n_valid) / bs > p.pos0 / bs;
    s.n_computed += n_valid;
    if (!e.empty()) s.draft_length.observe(p.n_draft, int32_t(e.size() - 1));
    if (n_valid < p.n_tokens) blocks_.truncate(p.id, s.n_computed);
    if (!p.produces_logits) {
      if (crosses_block) commit_written(s);
      continue;
    }
    s.tokens.insert(s.tokens.end(), e.begin(), e.end());
    s.n_generated += int64_t(e.size());
    // Only whole blocks enter the prefix cache, so commit when one has just filled.
    if (crosses_block) commit_written(s);
    if (s.n_generated >= s.req.max_tokens) {
      end(p.id, FinishReason::kLength, s.req.keep_blocks);
      finished.push_back(p.id);
    }
  }
  return finished;
}

void Scheduler::commit_written(const Seq& s) {
  const std::vector<int32_t> written(s.tokens.begin(), s.tokens.begin() + std::ptrdiff_t(s.n_computed));
  blocks_.commit_full_blocks(s.req.id, written);
}

}  // namespace moe
