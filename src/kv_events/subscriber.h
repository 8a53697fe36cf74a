#pragma once
// The receiving end of KV events, for the global scheduler: one thread with a ZeroMQ SUB
// socket connected to every instance's publisher, keeping a KvIndex of which blocks each
// instance holds. Instances come and go at run time. When an instance needs a snapshot
// (just added, messages lost, a message that would not decode) the subscriber asks its
// owner through a callback, and the owner hands the snapshot back with resync().
//
// Threads: the socket is the subscriber thread's alone. The index is read from any
// thread (a shared lock) and written by the subscriber thread and resync().
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "kv_events/kv_index.h"

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace moe::kv_events {

struct SubscriberConfig {
  // An instance still out of sync this long after its snapshot was asked for is asked again
  // (the fetch failed, or its answer was lost).
  std::chrono::milliseconds resync_retry{2000};
  // How often the thread looks at added or removed instances and due snapshot requests
  // while no message arrives.
  std::chrono::milliseconds poll_interval{50};
};

class KvEventSubscriber {
 public:
  // Called on the subscriber thread with the engine id of an instance that needs a snapshot:
  // fetch GET /internal/kv/blocks from it and pass the answer to resync(). It must return
  // quickly (start the fetch, do not wait for it): no message is read meanwhile.
  using ResyncRequest = std::function<void(const std::string& engine_id)>;

  explicit KvEventSubscriber(ResyncRequest on_resync, SubscriberConfig config = {});
  // Stops the thread; no callback runs after it returns.
  ~KvEventSubscriber();
  KvEventSubscriber(const KvEventSubscriber&) = delete;
  KvEventSubscriber& operator=(const KvEventSubscriber&) = delete;

  // Subscribes to the events of engine_id published at endpoint (the instance's
  // --kv-events-endpoint) and asks for its snapshot. Adding an instance again with another
  // endpoint moves it there. Throws Error when ZeroMQ refuses the endpoint. Any thread but
  // the subscriber's own (not from the callback): it waits for the subscriber thread's turn.
  void add_instance(const std::string& engine_id, const std::string& endpoint);
  // Forgets the instance and its blocks; unknown ids are ignored. Threads as add_instance.
  void remove_instance(const std::string& engine_id);
  // Any thread: the instance's snapshot, as asked for. False when messages after it are
  // missing; the subscriber then asks for a newer one.
  bool resync(const std::string& engine_id, const KvSnapshot& snapshot);

  // Thread-safe reads of the index (see KvIndex).
  size_t matched_blocks(const std::string& engine_id, std::span<const uint64_t> prompt_hashes) const;
  std::vector<KvIndex::Match> matches(std::span<const uint64_t> prompt_hashes) const;
  bool synced(const std::string& engine_id) const;
  size_t n_blocks(const std::string& engine_id) const;
  int32_t block_size(const std::string& engine_id) const;

 private:
  using Clock = std::chrono::steady_clock;

  void run();
  // Runs f on the subscriber thread at its next turn and waits for it; rethrows its error.
  void on_thread(std::function<void()> f);
  void receive_all();
  // frames: the first three of the n_frames the message had (only the topic if it had more).
  void receive_one(const std::vector<std::string>& frames, size_t n_frames);
  // Asks the owner for a snapshot of every out-of-sync instance whose last request is due.
  void request_resyncs();

  ResyncRequest on_resync_;
  SubscriberConfig config_;
  std::unique_ptr<zmq::context_t> ctx_;
  std::unique_ptr<zmq::socket_t> socket_;

  mutable std::shared_mutex index_mu_;
  KvIndex index_;

  std::mutex mu_;  // guards the fields below
  std::vector<std::packaged_task<void()>> tasks_;
  // When each out-of-sync instance's snapshot was last asked for; time_point{}: ask now.
  std::map<std::string, Clock::time_point> asked_;
  bool stopping_ = false;

  std::map<std::string, std::string> endpoints_;  // engine id -> endpoint; subscriber thread only
  std::thread thread_;
};

}  // namespace moe::kv_events
