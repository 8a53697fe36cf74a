#pragma once
// The publishing end of an engine instance's KV events: a ZeroMQ PUB socket that sends
// each batch of events as one message of the wire format (kv_events/wire.h), from a thread
// of its own, so that the engine thread never waits on the network. Subscribers that fall
// behind lose messages (ZeroMQ drops past the send high-water mark) and resync from a
// snapshot; the publisher never slows the engine down for them.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kv_events/events.h"

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace moe::kv_events {

struct PublisherConfig {
  // Where the PUB socket binds, e.g. tcp://127.0.0.1:5557; tcp://HOST:* picks a free port.
  std::string endpoint;
  std::string engine_id;  // the topic is "kv@<engine_id>"
  // Messages ZeroMQ queues for each subscriber before it drops them.
  int send_hwm = 10000;
  // Batches waiting for the sending thread; more are dropped (subscribers see the gap).
  size_t max_pending = 10000;
};

class KvEventPublisher {
 public:
  // Binds now: throws Error naming the endpoint when it cannot (bad address, port in use).
  explicit KvEventPublisher(PublisherConfig config);
  // Messages not yet sent are dropped: the instance is going away.
  ~KvEventPublisher();
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // Any thread; queues the message and returns. Callers number their messages 1, 2, ...
  // (the snapshot route reports the same numbers), one publisher per sequence.
  void publish(uint64_t seq, std::vector<KvEvent> events);

  // The endpoint as bound: with a '*' port, the port chosen.
  const std::string& endpoint() const { return bound_; }
  const std::string& topic() const { return topic_; }

 private:
  struct Pending {
    uint64_t seq;
    std::vector<KvEvent> events;
  };
  void run();

  PublisherConfig config_;
  std::string topic_, bound_;
  std::unique_ptr<zmq::context_t> ctx_;
  std::unique_ptr<zmq::socket_t> socket_;  // used by the sending thread once it runs

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Pending> pending_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace moe::kv_events
