#include "kv_events/publisher.h"

#include <zmq.hpp>

#include "core/error.h"
#include "kv_events/wire.h"

namespace moe::kv_events {

KvEventPublisher::KvEventPublisher(PublisherConfig config)
    : config_(std::move(config)),
      topic_(topic_of(config_.engine_id)),
      ctx_(std::make_unique<zmq::context_t>(1)),
      socket_(std::make_unique<zmq::socket_t>(*ctx_, zmq::socket_type::pub)) {
  if (config_.send_hwm < 1) fail("KV events: the send high-water mark must be at least 1, got {}", config_.send_hwm);
  if (config_.max_pending < 1) fail("KV events: at least 1 pending message must be allowed");
  // Closing never waits for subscribers to take what is still queued.
  socket_->set(zmq::sockopt::linger, 0);
  socket_->set(zmq::sockopt::sndhwm, config_.send_hwm);
  try {
    socket_->bind(config_.endpoint);
  } catch (const zmq::error_t& e) {
    fail("KV events: cannot bind a ZeroMQ PUB socket to '{}': {}", config_.endpoint, e.what());
  }
  bound_ = socket_->get(zmq::sockopt::last_endpoint);
  thread_ = std::thread([this] { run(); });
}

KvEventPublisher::~KvEventPublisher() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void KvEventPublisher::publish(uint64_t seq, std::vector<KvEvent> events) {
  {
    std::lock_guard lk(mu_);
    if (pending_.size() >= config_.max_pending) return;
    pending_.push_back(Pending{seq, std::move(events)});
  }
  wake_.notify_one();
}

void KvEventPublisher::run() {
  std::deque<Pending> batch;
  for (;;) {
    {
      std::unique_lock lk(mu_);
      wake_.wait(lk, [&] { return stopping_ || !pending_.empty(); });
      if (stopping_) return;
      batch.swap(pending_);
    }
    for (const Pending& p : batch) {
      const std::string seq = encode_seq(p.seq);
      const std::string payload = encode_events(p.events);
      // A PUB socket drops rather than blocks at the high-water mark; dontwait makes sure.
      const auto flags = zmq::send_flags::dontwait;
      socket_->send(zmq::buffer(topic_), flags | zmq::send_flags::sndmore);
      socket_->send(zmq::buffer(seq), flags | zmq::send_flags::sndmore);
      socket_->send(zmq::buffer(payload), flags);
    }
    batch.clear();
  }
}

}  // namespace moe::kv_events
