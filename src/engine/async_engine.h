#pragma once
// The engine as a service: an EngineCore on its own thread, fed by any number of client
// threads. Thread contract: the engine thread alone touches the core (scheduler, KV
// cache, samplers); submit() and cancel() only push onto an inbox under a mutex and wake
// the engine; outputs come back through each request's sink, called on the engine thread.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine_core.h"
#include "kv_events/events.h"

namespace moe {

struct AsyncEngineConfig {
  EngineConfig engine;
  int threads = 0;           // compute threads; <= 0: one per core
  size_t max_waiting = 256;  // requests queued but not running; more are refused
  // Takes the KV events of each engine turn that has some (docs/kv_events.md) as one
  // message, numbered 1, 2, ...; message 1 is AllCleared, sent as the engine starts. Called
  // on the engine thread, so it must only queue them. Unset: no events are recorded.
  std::function<void(uint64_t seq, std::vector<kv_events::KvEvent> events)> kv_event_sink;
  // Called once, on the engine thread, when the model's expert-parallel group failed (a rank
  // stopped answering): the engine has then ended every request and takes no more.
  std::function<void(const std::string& why)> on_group_failure;
};

class AsyncEngine {
 public:
  // Allocates the KV cache and starts the engine thread.
  AsyncEngine(Model& model, const Tokenizer& tokenizer, AsyncEngineConfig config);
  // Aborts every unfinished request (each sink gets its final kAbort output) and joins the
  // engine thread; stop() does so before destruction. In an expert-parallel group it
  // returns once every rank is stopping.
  void stop();
  ~AsyncEngine();
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  // Thread-safe. Checks the request (throws RequestError) and queues it; returns its id,
  // or nullopt when max_waiting requests are already waiting (the server answers 429).
  [[nodiscard]] std::optional<int64_t> submit(std::vector<int32_t> prompt, GenerateParams params, OutputSink sink);
  // Thread-safe. The decode half of a prefill/decode pair, as EngineCore::add_remote: the
  // sink's first output says which blocks to fill; then call kv_loaded. Same answers as
  // submit().
  [[nodiscard]] std::optional<int64_t> submit_remote(std::vector<int32_t> prompt, int32_t first_token,
                                                     std::vector<int32_t> draft_tokens, GenerateParams params,
                                                     OutputSink sink);
  // Thread-safe. The blocks of a submit_remote request are filled (ok), or could not be:
  // then it recomputes its prompt. Call it only once no more bytes will land in them.
  void kv_loaded(int64_t id, bool ok);
  // Thread-safe, answered at once (the engine thread may be in a long step): the lease ends
  // now and its blocks are freed at the engine's next turn.
  LeaseRelease release_lease(int64_t id);

  // The KV pool's memory: for registering with a transport. Its blocks are written by the
  // engine thread only; a leased block is not written until its lease ends.
  KvStore& kv() { return core_->kv(); }

  // Thread-safe. The request ends at the engine's next loop turn with kAbort, its KV
  // blocks freed. Unknown or finished ids are ignored.
  void cancel(int64_t id);

  // Thread-safe. At the engine's next turn, calls done on the engine thread with every block
  // in the prefix index and the number of the last message given to kv_event_sink before
  // (0 without one), so that the snapshot and the messages agree. done must return quickly.
  // False (and done never called) once the engine is stopping.
  [[nodiscard]] bool kv_snapshot(std::function<void(kv_events::KvSnapshot)> done);
  bool publishes_kv_events() const { return bool(config_.kv_event_sink); }

  // Thread-safe copy of the metrics as of the last step.
  EngineMetrics metrics() const;

  const Model& model() const { return model_; }
  const Tokenizer& tokenizer() const { return tok_; }
  const RequestLimits& limits() const { return limits_; }
  const AsyncEngineConfig& config() const { return config_; }

 private:
  struct Submission {
    int64_t id;
    std::vector<int32_t> prompt;
    GenerateParams params;
    OutputSink sink;
    Clock::time_point arrival;
    int32_t remote_first_token = -1;  // >= 0: submit_remote
    std::vector<int32_t> remote_draft_tokens;
  };
  std::optional<int64_t> enqueue(Submission s);

  void loop();
  // Engine thread, stopping in an expert-parallel group: goes on taking part in the other
  // ranks' steps until every rank is stopping, so that none waits on this one.
  void leave_group();
  // Engine thread: hands the events logged since the last call to kv_event_sink.
  void flush_kv_events();
  void answer_snapshots(std::vector<std::function<void(kv_events::KvSnapshot)>>& requests);
  // The final output of a request that never reached the core.
  static void end_unstarted(Submission& s, FinishKind kind, const std::string& error);

  Model& model_;
  const Tokenizer& tok_;
  AsyncEngineConfig config_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<EngineCore> core_;  // touched by the engine thread only, once started
  RequestLimits limits_;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Submission> inbox_;
  std::vector<int64_t> cancels_;
  std::vector<std::pair<int64_t, bool>> loaded_;
  std::vector<std::function<void(kv_events::KvSnapshot)>> snapshot_requests_;
  bool lease_ended_ = false;  // a release is waiting for the engine to free its blocks
  bool stopping_ = false;
  int64_t next_id_ = 1;
  size_t core_waiting_ = 0;  // the core's waiting queue, as of the last turn
  EngineMetrics snapshot_;
  uint64_t kv_seq_ = 0;  // the last KV-events message numbered; engine thread only

  std::thread thread_;
};

}  // namespace moe
