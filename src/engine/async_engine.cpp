#include "engine/async_engine.h"

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
  thread_ = std::thread([this] { loop(); });
}

AsyncEngine::~AsyncEngine() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

std::optional<int64_t> AsyncEngine::submit(std::vector<int32_t> prompt, GenerateParams params, OutputSink sink) {
  validate_request(prompt, params, limits_);
  const Clock::time_point arrival = Clock::now();
  int64_t id;
  {
    std::lock_guard lk(mu_);
    if (stopping_ || core_waiting_ + inbox_.size() >= config_.max_waiting) return std::nullopt;
    id = next_id_++;
    inbox_.push_back(Submission{id, std::move(prompt), std::move(params), std::move(sink), arrival});
  }
  wake_.notify_one();
  return id;
}

void AsyncEngine::cancel(int64_t id) {
  {
    std::lock_guard lk(mu_);
    cancels_.push_back(id);
  }
  wake_.notify_one();
}

EngineMetrics AsyncEngine::metrics() const {
  std::lock_guard lk(mu_);
  return snapshot_;
}

void AsyncEngine::loop() {
  std::deque<Submission> subs;
  std::vector<int64_t> cancels;
  for (;;) {
    {
      std::unique_lock lk(mu_);
      wake_.wait(lk, [&] { return stopping_ || !inbox_.empty() || !cancels_.empty() || core_->has_work(); });
      if (stopping_) break;
      subs.swap(inbox_);
      cancels.swap(cancels_);
      // They wait in the core until this turn's step admits them.
      core_waiting_ += subs.size();
    }
    // Submissions first, so a cancel that overtook its own request still finds it.
    for (Submission& s : subs) {
      try {
        core_->add(s.id, std::move(s.prompt), std::move(s.params), s.sink, s.arrival);
      } catch (const Error& e) {
        end_unstarted(s, FinishKind::kError, e.what());
      }
    }
    subs.clear();
    for (int64_t id : cancels) core_->abort(id);
    cancels.clear();
    core_->step();
    std::lock_guard lk(mu_);
    snapshot_ = core_->metrics();
    core_waiting_ = core_->n_waiting();
  }
  core_->abort_all();
  std::lock_guard lk(mu_);
  for (Submission& s : inbox_) end_unstarted(s, FinishKind::kAbort, "");
  inbox_.clear();
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
