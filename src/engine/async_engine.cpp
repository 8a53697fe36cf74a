#include "engine/async_engine.h"

#include <thread>

#include "moe/expert_parallel.h"

namespace moe {

AsyncEngine::AsyncEngine(Model& model, const Tokenizer& tokenizer, AsyncEngineConfig config)
    : model_(model),
      tok_(tokenizer),
      config_(config),
      pool_(std::make_unique<ThreadPool>(config.threads)),
      core_(std::make_unique<EngineCore>(model, tokenizer, config.engine, *pool_)),
      limits_(core_->limits()),
      snapshot_(core_->metrics()) {
  if (config_.max_waiting < 1) fail("the waiting queue must hold at least 1 request");
  if (config_.kv_event_sink) core_->record_kv_events();
  thread_ = std::thread([this] { loop(); });
}

AsyncEngine::~AsyncEngine() { stop(); }

void AsyncEngine::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

std::optional<int64_t> AsyncEngine::submit(std::vector<int32_t> prompt, GenerateParams params, OutputSink sink) {
  validate_request(prompt, params, limits_);
  return enqueue(Submission{0, std::move(prompt), std::move(params), std::move(sink), Clock::now()});
}

std::optional<int64_t> AsyncEngine::submit_remote(std::vector<int32_t> prompt, int32_t first_token,
                                                  std::vector<int32_t> draft_tokens, GenerateParams params, OutputSink sink) {
  validate_request(prompt, params, limits_);
  return enqueue(Submission{0, std::move(prompt), std::move(params), std::move(sink), Clock::now(), first_token,
                            std::move(draft_tokens)});
}

std::optional<int64_t> AsyncEngine::enqueue(Submission s) {
  int64_t id;
  {
    std::lock_guard lk(mu_);
    if (stopping_ || core_waiting_ + inbox_.size() >= config_.max_waiting) return std::nullopt;
    id = s.id = next_id_++;
    inbox_.push_back(std::move(s));
  }
  wake_.notify_one();
  return id;
}

void AsyncEngine::kv_loaded(int64_t id, bool ok) {
  {
    std::lock_guard lk(mu_);
    loaded_.emplace_back(id, ok);
  }
  wake_.notify_one();
}

LeaseRelease AsyncEngine::release_lease(int64_t id) {
  const LeaseRelease r = core_->leases().release(id, Clock::now());
  {
    std::lock_guard lk(mu_);
    lease_ended_ = true;
  }
  wake_.notify_one();
  return r;
}

void AsyncEngine::cancel(int64_t id) {
  {
    std::lock_guard lk(mu_);
    cancels_.push_back(id);
  }
  wake_.notify_one();
}

bool AsyncEngine::kv_snapshot(std::function<void(kv_events::KvSnapshot)> done) {
  {
    std::lock_guard lk(mu_);
    if (stopping_) return false;
    snapshot_requests_.push_back(std::move(done));
  }
  wake_.notify_one();
  return true;
}

void AsyncEngine::flush_kv_events() {
  if (!config_.kv_event_sink) return;
  std::vector<kv_events::KvEvent> events = core_->take_kv_events();
  if (!events.empty()) config_.kv_event_sink(++kv_seq_, std::move(events));
}

void AsyncEngine::answer_snapshots(std::vector<std::function<void(kv_events::KvSnapshot)>>& requests) {
  if (requests.empty()) return;
  // Every message numbered so far is out, and nothing changes the index until this returns.
  flush_kv_events();
  const kv_events::KvSnapshot snap{kv_seq_, core_->config().block_size, core_->blocks().cached_hashes()};
  for (auto& done : requests) done(snap);
  requests.clear();
}

EngineMetrics AsyncEngine::metrics() const {
  std::lock_guard lk(mu_);
  return snapshot_;
}

namespace {

constexpr std::chrono::milliseconds kGroupPoll{2};

}  // namespace

void AsyncEngine::loop() {
  std::deque<Submission> subs;
  std::vector<int64_t> cancels;
  std::vector<std::pair<int64_t, bool>> loaded;
  std::vector<std::function<void(kv_events::KvSnapshot)>> snapshots;
  if (config_.kv_event_sink) config_.kv_event_sink(++kv_seq_, {kv_events::AllCleared{}});
  // The last step found nothing to do: only an event from outside (or a lease running
  // out) can change that, so wait for one instead of spinning.
  bool stalled = false;
  // In an expert-parallel group the other ranks wait for this one to join each of their
  // steps: while the whole group is idle, look again every kGroupPoll.
  const bool in_group = core_->in_expert_parallel_group();
  bool group_failed = false;
  for (;;) {
    {
      std::unique_lock lk(mu_);
      const auto ready = [&] {
        return stopping_ || !inbox_.empty() || !cancels_.empty() || !loaded_.empty() || lease_ended_ ||
               !snapshot_requests_.empty() || ((core_->has_work() || in_group) && !stalled);
      };
      std::optional<Clock::time_point> expiry = core_->next_lease_expiry();
      if (in_group) expiry = std::min(expiry.value_or(Clock::time_point::max()), Clock::now() + kGroupPoll);
      if (expiry) {
        wake_.wait_until(lk, *expiry, ready);
      } else {
        wake_.wait(lk, ready);
      }
      if (stopping_) break;
      subs.swap(inbox_);
      cancels.swap(cancels_);
      loaded.swap(loaded_);
      snapshots.swap(snapshot_requests_);
      lease_ended_ = false;
      // They wait in the core until this turn's step admits them.
      core_waiting_ += subs.size();
    }
    answer_snapshots(snapshots);
    // Submissions first, so a cancel that overtook its own request still finds it.
    for (Submission& s : subs) {
      try {
        if (s.remote_first_token >= 0) {
          core_->add_remote(s.id, std::move(s.prompt), s.remote_first_token, std::move(s.params), s.sink, s.arrival,
                            std::move(s.remote_draft_tokens));
        } else {
          core_->add(s.id, std::move(s.prompt), std::move(s.params), s.sink, s.arrival);
        }
      } catch (const Error& e) {
        end_unstarted(s, FinishKind::kError, e.what());
      }
    }
    subs.clear();
    for (int64_t id : cancels) core_->abort(id);
    cancels.clear();
    for (const auto& [id, ok] : loaded) core_->kv_loaded(id, ok);
    loaded.clear();
    core_->end_leases(Clock::now());
    try {
      stalled = !core_->step();
    } catch (const Error& e) {
      if (!in_group) throw;
      group_failed = true;
      {
        std::lock_guard lk(mu_);
        stopping_ = true;
      }
      if (config_.on_group_failure) config_.on_group_failure(e.what());
      break;
    }
    flush_kv_events();
    std::lock_guard lk(mu_);
    snapshot_ = core_->metrics();
    core_waiting_ = core_->n_waiting();
  }
  core_->abort_all();
  if (in_group && !group_failed) leave_group();
  {
    // Requests made before stopping_ was set still get their answer.
    std::lock_guard lk(mu_);
    snapshots.swap(snapshot_requests_);
  }
  answer_snapshots(snapshots);
  std::lock_guard lk(mu_);
  for (Submission& s : inbox_) end_unstarted(s, FinishKind::kAbort, "");
  inbox_.clear();
}

void AsyncEngine::leave_group() {
  ExpertParallel& ep = *model_.expert_parallel();
  ep.leave();
  try {
    while (!ep.everyone_left()) {
      if (!core_->step()) std::this_thread::sleep_for(kGroupPoll);
    }
  } catch (const Error& e) {
    // A rank that stopped without leaving: nobody is left to wait on this one either.
    if (config_.on_group_failure) config_.on_group_failure(e.what());
  }
}

void AsyncEngine::end_unstarted(Submission& s, FinishKind kind, const std::string& error) {
  RequestOutput out;
  out.id = s.id;
  out.finished = true;
  out.finish = kind;
  out.error = error;
  out.n_prompt_tokens = int64_t(s.prompt.size());
  s.sink(std::move(out));
}

}  // namespace moe
