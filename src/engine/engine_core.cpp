#include "engine/engine_core.h"

#include <algorithm>
#include <limits>

#include "core/thread_pool.h"
#include "moe/expert_parallel.h"

namespace moe {

namespace {

// The model's view of a plan; its slices point into the plan, which must outlive it.
Step model_step(const StepPlan& plan) {
  Step step;
  step.tokens.reserve(size_t(plan.n_batched_tokens));
  for (const ScheduledSeq& s : plan.seqs) {
    step.tokens.insert(step.tokens.end(), s.tokens.begin(), s.tokens.end());
    // A decode with drafts verifies every drafted token: a row for each.
    const LogitRows rows = s.all_logits || s.n_draft > 0 ? LogitRows::kAll
                           : s.produces_logits      ? LogitRows::kLast
                                                    : LogitRows::kNone;
    step.seqs.push_back(SeqSlice{&s.block_table, s.pos0, s.n_tokens, rows});
  }
  return step;
}

}  // namespace

EngineConfig one_request_config(int64_t n_prompt, int64_t max_tokens, KvDtype dtype, const SpeculativeConfig& spec) {
  EngineConfig c;
  c.kv_dtype = dtype;
  c.speculative = spec;
  c.n_blocks = int32_t((n_prompt + max_tokens + spec.num_speculative_tokens) / c.block_size + 2);
  c.scheduler.max_num_seqs = 1;
  c.scheduler.max_num_batched_tokens = std::max<int64_t>(n_prompt, 1 + spec.num_speculative_tokens);
  return c;
}

const char* finish_kind_name(FinishKind k) {
  switch (k) {
    case FinishKind::kStop: return "stop";
    case FinishKind::kLength: return "length";
    case FinishKind::kAbort: return "abort";
    case FinishKind::kError: return "error";
    case FinishKind::kNone: break;
  }
  return "";
}

int32_t kv_blocks_for_memory(const Model& model, double gib, int32_t block_size, KvDtype dtype, bool with_mtp) {
  if (!(gib > 0.0)) fail("KV cache memory must be > 0 GiB, got {}", gib);
  if (block_size < 1) fail("block size must be >= 1, got {}", block_size);
  const ModelConfig& c = model.config();
  const double layers = double(c.n_layer + (with_mtp ? c.n_nextn : 0));
  const double block_bytes = layers * double(c.kv_row_format(dtype).bytes()) * double(block_size);
  const double n = gib * double(1ull << 30) / block_bytes;
  if (n < 1.0) fail("{} GiB of KV cache is less than one block of {} positions ({:.0f} bytes)", gib, block_size, block_bytes);
  return int32_t(std::min(n, double(std::numeric_limits<int32_t>::max())));
}

void validate_request(const std::vector<int32_t>& prompt, const GenerateParams& params, const RequestLimits& limits) {
  if (prompt.empty()) throw RequestError("the prompt is empty", "prompt");
  for (int32_t t : prompt) {
    if (t < 0 || t >= limits.n_vocab) {
      throw RequestError(fmt::format("token id {} is outside the vocabulary [0, {})", t, limits.n_vocab), "prompt");
    }
  }
  if (params.max_tokens < 1) {
    throw RequestError(fmt::format("max_tokens must be at least 1, got {}", params.max_tokens), "max_tokens");
  }
  const int64_t n_prompt = int64_t(prompt.size());
  if (n_prompt >= limits.max_model_len) {
    throw RequestError(fmt::format("this model's maximum context length is {} tokens, but the prompt has {} tokens",
                                   limits.max_model_len, n_prompt),
                       "prompt");
  }
  if (n_prompt + params.max_tokens > limits.max_model_len) {
    throw RequestError(fmt::format("this model's maximum context length is {} tokens; the prompt has {} tokens, so "
                                   "max_tokens can be at most {}, got {}",
                                   limits.max_model_len, n_prompt, limits.max_model_len - n_prompt, params.max_tokens),
                       "max_tokens");
  }
  if (n_prompt + params.max_tokens > limits.kv_capacity_tokens) {
    throw RequestError(fmt::format("the prompt ({} tokens) plus max_tokens ({}) exceeds the KV cache ({} tokens)", n_prompt,
                                   params.max_tokens, limits.kv_capacity_tokens),
                       "max_tokens");
  }
  for (int32_t t : params.stop_token_ids) {
    if (t < 0 || t >= limits.n_vocab) {
      throw RequestError(fmt::format("stop token id {} is outside the vocabulary [0, {})", t, limits.n_vocab),
                         "stop_token_ids");
    }
  }
  if (params.prompt_logprobs < -1 || params.prompt_logprobs > 20) {
    throw RequestError(fmt::format("prompt_logprobs must be -1 (off) or in [0, 20], got {}", params.prompt_logprobs), "prompt_logprobs");
  }
  for (const auto& [t, bias] : params.sampling.logit_bias) {
    if (t >= limits.n_vocab) {
      throw RequestError(fmt::format("logit_bias token id {} is outside the vocabulary [0, {})", t, limits.n_vocab), "logit_bias");
    }
  }
  try {
    params.sampling.validate();
  } catch (const Error& e) {
    const std::string msg = e.what();
    throw RequestError(msg, msg.substr(0, msg.find(' ')));  // every message starts with the field
  }
}

struct EngineCore::Active {
  Active(const Tokenizer& tok, const std::vector<int32_t>& prompt, GenerateParams p, OutputSink s, Clock::time_point t)
      : params(std::move(p)),
        sink(std::move(s)),
        sampler(params.sampling, prompt),
        decoder(tok, params.skip_special_tokens),
        stops(params.stop),
        arrival(t),
        n_prompt(int64_t(prompt.size())) {
    if (params.prompt_logprobs >= 0) prompt_tokens = prompt;
  }

  GenerateParams params;
  OutputSink sink;
  Sampler sampler;
  StreamDecoder decoder;
  StopMatcher stops;
  Clock::time_point arrival, last_token;
  int64_t n_prompt;
  int64_t n_output = 0;
  int64_t n_cached = 0;
  int64_t n_preempted = 0;
  int64_t n_draft_tokens = 0;     // drafted tokens verified for it
  int64_t n_accepted_tokens = 0;  // of which were accepted
  bool scheduled = false;
  bool remote = false;  // added by add_remote: its first token came from elsewhere
  std::vector<int32_t> prompt_tokens;       // kept only with prompt_logprobs
  std::vector<TokenOutput> prompt_logprobs;  // entry i: prompt token i + 1
};

namespace {

// The MTP drafter keeps its rows in the engine's cache, with scratch blocks past the
// engine's own (MtpDrafter::scratch_blocks).
KvStore make_engine_kv(const Model& model, const EngineConfig& config) {
  if (!speculative_uses_mtp(config.speculative) || model.n_mtp_layers() <= 0) {
    return model.make_kv_store(config.block_size, config.n_blocks, config.kv_dtype);
  }
  const int32_t scratch = MtpDrafter::scratch_blocks(config.speculative.num_speculative_tokens, config.block_size,
                                                     config.scheduler.max_num_seqs);
  return model.make_kv_store(config.block_size, int64_t(config.n_blocks) + scratch, config.kv_dtype, /*with_mtp=*/true);
}

}  // namespace

EngineCore::EngineCore(Model& model, const Tokenizer& tokenizer, EngineConfig config, ThreadPool& pool)
    : model_(model),
      tok_(tokenizer),
      config_(config),
      pool_(pool),
      kv_(make_engine_kv(model, config)),
      blocks_(config.n_blocks, config.block_size),
      scheduler_(
          [&] {
            SchedulerConfig c = config.scheduler;
            c.num_speculative_tokens = config.speculative.enabled() ? config.speculative.num_speculative_tokens : 0;
            c.adaptive_drafts = config.speculative.adaptive;
            return c;
          }(),
          blocks_) {
  if (speculative_uses_mtp(config.speculative)) {
    if (model.n_mtp_layers() <= 0) {
      throw RequestError(fmt::format("{}: speculative decoding with method mtp needs the model's MTP layer, and the file has none "
                                     "(nextn_predict_layers)", model.file().path()), "speculative_config");
    }
    auto mtp = std::make_unique<MtpDrafter>(model, kv_, config.speculative.num_speculative_tokens, config.n_blocks,
                                            config.scheduler.max_num_seqs);
    mtp_ = mtp.get();
    drafter_ = std::move(mtp);
  } else {
    drafter_ = make_drafter(config.speculative);
  }
  scheduler_.set_draft_source(drafter_.get());
  if (config_.max_model_len <= 0) config_.max_model_len = model.config().n_ctx_train;
  limits_.n_vocab = model.config().n_vocab;
  limits_.max_model_len = config_.max_model_len;
  limits_.kv_capacity_tokens = int64_t(config.n_blocks) * config.block_size;
  metrics_.kv_blocks_total = config.n_blocks;
  metrics_.kv_block_size = config.block_size;
  metrics_.kv_cache_dtype = kv_dtype_name(kv_.dtype());
  metrics_.kv_bytes_per_token = kv_.row_bytes() * kv_.n_layers();
  metrics_.num_speculative_tokens = config_.speculative.enabled() ? config_.speculative.num_speculative_tokens : 0;
}

EngineCore::~EngineCore() = default;

void EngineCore::wrap_drafter(const std::function<std::unique_ptr<DraftSource>(std::unique_ptr<DraftSource>)>& wrap) {
  drafter_ = wrap(std::move(drafter_));
  scheduler_.set_draft_source(drafter_.get());
}

void EngineCore::set_drafter(std::unique_ptr<DraftSource> drafter) {
  mtp_ = nullptr;
  drafter_ = std::move(drafter);
  scheduler_.set_draft_source(drafter_.get());
}

void EngineCore::add(int64_t id, std::vector<int32_t> prompt, GenerateParams params, OutputSink sink,
                     Clock::time_point arrival) {
  validate_request(prompt, params, limits_);
  if (active_.count(id)) fail("request id {} is already in use", id);
  auto a = std::make_unique<Active>(tok_, prompt, params, std::move(sink), arrival);
  Request r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.max_tokens = params.max_tokens;
  r.priority = params.priority;
  r.prompt_logits = params.prompt_logprobs >= 0;
  r.keep_blocks = params.remote_decode;
  // The decode instance generates the rest: here only the first token.
  if (params.remote_decode) r.max_tokens = 1;
  if (!scheduler_.add(std::move(r))) fail("request {} rejected: {}", id, scheduler_.reject_reason(id));
  active_.emplace(id, std::move(a));
  refresh_gauges();
}

void EngineCore::add_remote(int64_t id, std::vector<int32_t> prompt, int32_t first_token, GenerateParams params,
                            OutputSink sink, Clock::time_point arrival, std::vector<int32_t> draft_tokens) {
  validate_request(prompt, params, limits_);
  if (first_token < 0 || first_token >= limits_.n_vocab) {
    throw RequestError(fmt::format("the first token id {} is outside the vocabulary [0, {})", first_token, limits_.n_vocab),
                       "kv_transfer_params");
  }
  if (params.max_tokens < 2) {
    throw RequestError("max_tokens must be at least 2 for a decode instance: the prefill instance made the first token",
                       "max_tokens");
  }
  for (int32_t t : draft_tokens) {
    if (t < 0 || t >= limits_.n_vocab) {
      throw RequestError(fmt::format("the drafted token id {} is outside the vocabulary [0, {})", t, limits_.n_vocab),
                         "kv_transfer_params");
    }
  }
  if (params.prompt_logprobs >= 0) {
    throw RequestError("prompt_logprobs come from the prefill instance, not the decode instance", "prompt_logprobs");
  }
  if (active_.count(id)) fail("request id {} is already in use", id);
  params.remote_decode = false;
  auto a = std::make_unique<Active>(tok_, prompt, params, std::move(sink), arrival);
  // The state this request would have here right after sampling first_token: the draw
  // spent, the token counted, its text through the decoders (already sent by the prefill
  // instance, but what they hold back is still pending).
  a->sampler.replay(first_token);
  a->stops.push(a->decoder.push(first_token));
  a->n_output = 1;
  a->remote = true;
  Request r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.max_tokens = params.max_tokens;
  r.priority = params.priority;
  r.remote_first_token = first_token;
  const size_t n_tokens = r.prompt.size() + 1;
  if (!scheduler_.add(std::move(r))) fail("request {} rejected: {}", id, scheduler_.reject_reason(id));
  if (mtp_) mtp_->seed(id, n_tokens, std::move(draft_tokens));
  active_.emplace(id, std::move(a));
  refresh_gauges();
}

void EngineCore::kv_loaded(int64_t id, bool ok) {
  if (!active_.count(id)) return;
  scheduler_.kv_loaded(id, ok);
  ++metrics_.kv_remote_loads_total[ok ? 0 : 1];
  refresh_gauges();
}

LeaseRelease EngineCore::release_lease(int64_t id) {
  const LeaseRelease r = leases_.release(id, Clock::now());
  end_leases(Clock::now());
  return r;
}

void EngineCore::end_leases(Clock::time_point now) {
  for (int64_t id : leases_.take_ended(now)) blocks_.free(id);
  refresh_gauges();
}

void EngineCore::abort(int64_t id) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  scheduler_.abort(id);
  RequestOutput out;
  finish(id, *it->second, out, FinishKind::kAbort, Clock::now());
  refresh_gauges();
}

void EngineCore::abort_all() {
  std::vector<int64_t> ids;
  for (const auto& [id, a] : active_) ids.push_back(id);
  for (int64_t id : ids) abort(id);
}

int64_t EngineCore::n_preemptions(int64_t id) const {
  auto it = active_.find(id);
  return it == active_.end() ? 0 : it->second->n_preempted;
}

bool EngineCore::step() {
  bool ran_model = false;
  const bool busy = step_here(ran_model);
  // Under expert parallelism every rank joins every step of the group: one that ran no
  // batch of its own joins without tokens, so that the ranks that have some can run theirs.
  if (!ran_model && model_.expert_parallel()) {
    const bool group_busy = model_.step_idle(pool_);
    if (group_busy && mtp_) mtp_->idle_rounds(pool_);
    refresh_gauges();
    return group_busy || busy;
  }
  return busy;
}

bool EngineCore::step_here(bool& ran_model) {
  if (!has_work()) return false;
  const StepPlan plan = scheduler_.schedule();
  announce_kv_loads(plan);
  metrics_.num_preemptions_total += plan.preempted.size();
  for (int64_t id : plan.preempted) ++active_.at(id)->n_preempted;
  const Clock::time_point scheduled_at = Clock::now();
  for (const ScheduledSeq& s : plan.seqs) {
    Active& a = *active_.at(s.id);
    if (!a.scheduled) mark_scheduled(a, s.pos0, scheduled_at);
  }
  if (plan.empty()) {
    refresh_gauges();
    return !plan.kv_loads.empty() || !plan.preempted.empty();
  }
  ran_model = true;
  run_model(plan);

  // Logit rows come in plan order, n_logit_rows() per sequence: prompt logprobs from the
  // rows of all-logits chunks, then the emitted tokens from the last 1 + n_draft rows of
  // every sequence that produces logits.
  std::vector<std::vector<SampleResult>> results;
  const int64_t n_vocab = model_.config().n_vocab;
  int64_t row = 0;
  for (const ScheduledSeq& s : plan.seqs) {
    Active& a = *active_.at(s.id);
    if (s.all_logits) collect_prompt_logprobs(a, s, logits_.data() + row * n_vocab);
    row += s.n_logit_rows();
    if (!s.produces_logits) continue;
    results.push_back(verify_and_sample(a, s, logits_.data() + (row - 1 - s.n_draft) * n_vocab));
  }
  postprocess(plan, results, Clock::now());
  return true;
}

std::vector<SampleResult> EngineCore::verify_and_sample(Active& a, const ScheduledSeq& s, const float* rows) {
  const int64_t n_vocab = model_.config().n_vocab;
  std::vector<SampleResult> run;
  for (int32_t i = 0;; ++i) {
    SampleResult r;
    const float* row = rows + int64_t(i) * n_vocab;
    if (i == s.n_draft) {
      a.sampler.sample(row, n_vocab, &r);
    } else {
      a.sampler.verify(row, n_vocab, s.tokens[size_t(s.n_tokens - s.n_draft + i)], &r);
    }
    // The next row's penalties count this token.
    a.sampler.accept(r.token);
    const bool accepted = i < s.n_draft && r.token == s.tokens[size_t(s.n_tokens - s.n_draft + i)];
    run.push_back(std::move(r));
    if (!accepted) break;
  }
  if (s.n_draft > 0) {
    const size_t n_accepted = run.size() - 1;
    ++metrics_.spec_decode_num_drafts;
    metrics_.spec_decode_num_draft_tokens += uint64_t(s.n_draft);
    metrics_.spec_decode_num_accepted_tokens += n_accepted;
    if (metrics_.spec_decode_accepted_per_pos.size() < size_t(s.n_draft)) metrics_.spec_decode_accepted_per_pos.resize(size_t(s.n_draft));
    for (size_t i = 0; i < n_accepted; ++i) ++metrics_.spec_decode_accepted_per_pos[i];
    a.n_draft_tokens += s.n_draft;
    a.n_accepted_tokens += int64_t(n_accepted);
  }
  return run;
}

void EngineCore::mark_scheduled(Active& a, int64_t n_cached, Clock::time_point now) {
  a.scheduled = true;
  metrics_.request_queue_time.observe(std::chrono::duration<double>(now - a.arrival).count());
  metrics_.prompt_tokens_total += uint64_t(a.n_prompt);
  a.n_cached = n_cached;
}

void EngineCore::announce_kv_loads(const StepPlan& plan) {
  const Clock::time_point now = Clock::now();
  for (const KvLoad& l : plan.kv_loads) {
    Active& a = *active_.at(l.id);
    // Admitted now; the positions found here are its prefix-cache hits (the rest is pulled).
    mark_scheduled(a, l.n_cached, now);
    RequestOutput out;
    out.id = l.id;
    out.kv = KvBlocks{l.block_table, a.n_prompt, l.n_cached};
    out.n_prompt_tokens = a.n_prompt;
    out.n_output_tokens = a.n_output;
    out.n_cached_tokens = a.n_cached;
    a.sink(std::move(out));
  }
}

void EngineCore::collect_prompt_logprobs(Active& a, const ScheduledSeq& s, const float* rows) {
  const int64_t n_vocab = model_.config().n_vocab;
  for (int64_t j = 0; j < s.n_tokens; ++j) {
    // Row j predicts the token at position pos0 + j + 1. A recompute after a preemption
    // mid-prefill repeats positions already collected.
    const int64_t next = s.pos0 + j + 1;
    if (next >= a.n_prompt || next - 1 != int64_t(a.prompt_logprobs.size())) continue;
    a.prompt_logprobs.push_back(token_logprobs(rows + j * n_vocab, n_vocab, a.prompt_tokens[size_t(next)], a.params.prompt_logprobs));
  }
}

void EngineCore::run_model(const StepPlan& plan) {
  Step step = model_step(plan);
  step.want_hidden = mtp_ != nullptr;
  logits_.resize(size_t(step.n_logit_rows() * model_.config().n_vocab));
  model_.forward(step, kv_, logits_.data(), pool_);
}

void EngineCore::postprocess(const StepPlan& plan, const std::vector<std::vector<SampleResult>>& results, Clock::time_point now) {
  std::vector<std::vector<int32_t>> emitted;
  emitted.reserve(results.size());
  for (const std::vector<SampleResult>& run : results) {
    emitted.emplace_back();
    for (const SampleResult& r : run) emitted.back().push_back(r.token);
  }
  // Before the scheduler commits the step: a request it ends now (a prefill instance's,
  // at its first token) still has its last positions' MTP rows written, for the hand-off.
  if (mtp_) {
    mtp_->after_step(plan, emitted, model_.hidden_states(), [this](int64_t id) { return scheduler_.running_tokens(id); }, pool_);
  }
  const std::vector<int64_t> hit_length = scheduler_.on_step_done(plan, emitted);
  size_t k = 0;
  for (const ScheduledSeq& s : plan.seqs) {
    if (!s.produces_logits) continue;
    const std::vector<SampleResult>& run = results[k++];
    Active& a = *active_.at(s.id);
    RequestOutput out;
    // A stop inside an accepted run ends the output there, as it would without drafts.
    bool stopped = false;
    for (size_t i = 0; i < run.size() && !stopped; ++i) stopped = emit_token(a, run[i], out, now, i, run.size());
    const bool at_length = std::find(hit_length.begin(), hit_length.end(), s.id) != hit_length.end();
    if (a.params.remote_decode && at_length) {
      // The scheduler kept the blocks: a lease takes them, or they go now.
      if (stopped) {
        blocks_.free(s.id);
        finish(s.id, a, out, FinishKind::kStop, now);
      } else {
        hand_off(s.id, a, out, now);
      }
    } else if (stopped) {
      scheduler_.finish(s.id);
      finish(s.id, a, out, FinishKind::kStop, now);
    } else if (at_length) {
      finish(s.id, a, out, FinishKind::kLength, now);
    } else {
      out.id = s.id;
      out.n_prompt_tokens = a.n_prompt;
      out.n_output_tokens = a.n_output;
      out.n_cached_tokens = a.n_cached;
      a.sink(std::move(out));
    }
  }
  metrics_.prefix_cache_queries = blocks_.prefix_queries();
  metrics_.prefix_cache_hits = blocks_.prefix_hits();
  refresh_gauges();
}

void EngineCore::hand_off(int64_t id, Active& a, RequestOutput& out, Clock::time_point now) {
  leases_.grant(id, now + config_.kv_lease);
  out.kv = KvBlocks{blocks_.table(id), a.n_prompt, 0, mtp_ ? mtp_->drafts(id) : std::vector<int32_t>{}};
  finish(id, a, out, FinishKind::kLength, now, /*flush=*/false);
}

bool EngineCore::emit_token(Active& a, const SampleResult& r, RequestOutput& out, Clock::time_point now, size_t i_in_step,
                            size_t n_in_step) {
  if (i_in_step == 0) {
    if (a.n_output == 0) {
      metrics_.time_to_first_token.observe(std::chrono::duration<double>(now - a.arrival).count());
    } else if (!(a.remote && a.n_output == 1)) {
      // A decode instance's first token follows one made elsewhere, at a time not known
      // here. Tokens of one step share its time, so the mean stays time over tokens.
      const double gap = std::chrono::duration<double>(now - a.last_token).count() / double(n_in_step);
      for (size_t i = 0; i < n_in_step; ++i) metrics_.time_per_output_token.observe(gap);
    }
    a.last_token = now;
  }
  if (a.n_output == 0) out.prompt_logprobs = std::move(a.prompt_logprobs);
  ++a.n_output;
  ++metrics_.generation_tokens_total;
  out.tokens.push_back(TokenOutput{r.token, r.logprob, r.top});

  const GenerateParams& p = a.params;
  const bool is_eos = !p.ignore_eos && r.token >= 0 && (r.token == tok_.eos_id() || r.token == tok_.eot_id());
  const bool is_stop_token = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), r.token) != p.stop_token_ids.end();
  if (is_eos || is_stop_token) {
    if (is_stop_token) out.stop_token = r.token;
    return true;
  }
  const StopMatcher::Result m = a.stops.push(a.decoder.push(r.token));
  out.text += m.text;
  if (m.stopped) {
    out.stop_string = p.stop[m.which];
    return true;
  }
  return false;
}

void EngineCore::finish(int64_t id, Active& a, RequestOutput& out, FinishKind kind, Clock::time_point now, bool flush) {
  // A stop string already cut the text; otherwise what the decoders held back is final.
  if (flush && out.stop_string.empty()) {
    const StopMatcher::Result m = a.stops.push(a.decoder.finish());
    out.text += m.text;
    if (m.stopped) {
      out.stop_string = a.params.stop[m.which];
      kind = FinishKind::kStop;
    } else {
      out.text += a.stops.finish();
    }
  }
  out.id = id;
  out.finished = true;
  out.finish = kind;
  out.n_prompt_tokens = a.n_prompt;
  out.n_output_tokens = a.n_output;
  out.n_cached_tokens = a.n_cached;
  out.n_draft_tokens = a.n_draft_tokens;
  out.n_accepted_tokens = a.n_accepted_tokens;
  metrics_.e2e_request_latency.observe(std::chrono::duration<double>(now - a.arrival).count());
  ++metrics_.request_success_total[size_t(kind)];
  OutputSink sink = std::move(a.sink);
  if (mtp_) mtp_->forget(id);
  active_.erase(id);
  scheduler_.forget(id);
  sink(std::move(out));
}

void EngineCore::refresh_gauges() {
  metrics_.num_requests_running = int64_t(scheduler_.n_running());
  metrics_.num_requests_waiting = int64_t(scheduler_.n_waiting());
  metrics_.kv_cache_usage_perc = blocks_.usage();
  metrics_.kv_blocks_used = blocks_.n_used();
  metrics_.kv_leases_active = int64_t(leases_.n_held());
  metrics_.kv_leases_released_total = leases_.n_released();
  metrics_.kv_leases_expired_total = leases_.n_expired();
  if (const ExpertParallel* ep = model_.expert_parallel()) {
    metrics_.expert_parallel = true;
    metrics_.ep_expert_tokens_total = ep->load().computed_total();
    metrics_.ep_load_imbalance = ep->load().imbalance();
    metrics_.ep_replacements_total = ep->replacements();
    metrics_.ep_expert_bytes_moved_total = ep->bytes_moved();
  }
}

}  // namespace moe
