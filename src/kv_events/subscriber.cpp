#include "kv_events/subscriber.h"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <zmq.hpp>

#include "core/error.h"
#include "kv_events/wire.h"

namespace moe::kv_events {

namespace {

// Frames of a well-formed message; more are read and counted but not kept.
constexpr size_t kFrames = 3;
// Messages read per turn, so that added instances and due snapshot requests are not held
// up by a busy stream.
constexpr int kMessagesPerTurn = 1000;

}  // namespace

KvEventSubscriber::KvEventSubscriber(ResyncRequest on_resync, SubscriberConfig config)
    : on_resync_(std::move(on_resync)),
      config_(config),
      ctx_(std::make_unique<zmq::context_t>(1)),
      socket_(std::make_unique<zmq::socket_t>(*ctx_, zmq::socket_type::sub)) {
  if (!on_resync_) fail("KV events: the subscriber needs a resync callback");
  socket_->set(zmq::sockopt::linger, 0);
  // A peer cannot make us hold more than one payload's worth per frame.
  socket_->set(zmq::sockopt::maxmsgsize, int64_t(kMaxPayloadBytes));
  thread_ = std::thread([this] { run(); });
}

KvEventSubscriber::~KvEventSubscriber() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  thread_.join();
}

void KvEventSubscriber::on_thread(std::function<void()> f) {
  std::packaged_task<void()> task(std::move(f));
  std::future<void> done = task.get_future();
  {
    std::lock_guard lk(mu_);
    tasks_.push_back(std::move(task));
  }
  done.get();
}

void KvEventSubscriber::add_instance(const std::string& engine_id, const std::string& endpoint) {
  // In the index before the socket hears of it, so that its first messages are not ignored.
  bool added;
  {
    std::unique_lock lk(index_mu_);
    added = !index_.has(engine_id);
    index_.add(engine_id);
  }
  bool unchanged = false;
  try {
    on_thread([&] {
      const auto it = endpoints_.find(engine_id);
      unchanged = it != endpoints_.end() && it->second == endpoint;
      if (unchanged) return;
      try {
        socket_->connect(endpoint);
      } catch (const zmq::error_t& e) {
        fail("KV events: cannot connect to '{}' (instance {}): {}", endpoint, engine_id, e.what());
      }
      if (it != endpoints_.end()) {
        socket_->disconnect(it->second);
      } else {
        socket_->set(zmq::sockopt::subscribe, topic_of(engine_id));
      }
      endpoints_[engine_id] = endpoint;
    });
  } catch (const Error&) {
    if (added) {
      std::unique_lock lk(index_mu_);
      index_.remove(engine_id);
    }
    throw;
  }
  if (unchanged) return;
  if (!added) {
    // Another endpoint is another publisher: nothing known from the old one holds.
    std::unique_lock lk(index_mu_);
    index_.remove(engine_id);
    index_.add(engine_id);
  }
  std::lock_guard lk(mu_);
  asked_.erase(engine_id);
}

void KvEventSubscriber::remove_instance(const std::string& engine_id) {
  on_thread([&] {
    const auto it = endpoints_.find(engine_id);
    if (it == endpoints_.end()) return;
    socket_->set(zmq::sockopt::unsubscribe, topic_of(engine_id));
    socket_->disconnect(it->second);
    endpoints_.erase(it);
  });
  {
    std::unique_lock lk(index_mu_);
    index_.remove(engine_id);
  }
  std::lock_guard lk(mu_);
  asked_.erase(engine_id);
}

bool KvEventSubscriber::resync(const std::string& engine_id, const KvSnapshot& snapshot) {
  {
    std::unique_lock lk(index_mu_);
    if (index_.reset(engine_id, snapshot)) return true;
  }
  // Ask again at the next turn rather than after resync_retry: the gap is known now.
  std::lock_guard lk(mu_);
  asked_.erase(engine_id);
  return false;
}

size_t KvEventSubscriber::matched_blocks(const std::string& engine_id, std::span<const uint64_t> prompt_hashes) const {
  std::shared_lock lk(index_mu_);
  return index_.matched_blocks(engine_id, prompt_hashes);
}

std::vector<KvIndex::Match> KvEventSubscriber::matches(std::span<const uint64_t> prompt_hashes) const {
  std::shared_lock lk(index_mu_);
  return index_.matches(prompt_hashes);
}

bool KvEventSubscriber::synced(const std::string& engine_id) const {
  std::shared_lock lk(index_mu_);
  return index_.synced(engine_id);
}

size_t KvEventSubscriber::n_blocks(const std::string& engine_id) const {
  std::shared_lock lk(index_mu_);
  return index_.n_blocks(engine_id);
}

int32_t KvEventSubscriber::block_size(const std::string& engine_id) const {
  std::shared_lock lk(index_mu_);
  return index_.block_size(engine_id);
}

void KvEventSubscriber::run() {
  std::vector<std::packaged_task<void()>> tasks;
  for (;;) {
    {
      std::lock_guard lk(mu_);
      if (stopping_) return;
      tasks.swap(tasks_);
    }
    for (auto& t : tasks) t();
    tasks.clear();
    try {
      zmq::pollitem_t item{socket_->handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, config_.poll_interval);
      if (item.revents & ZMQ_POLLIN) receive_all();
    } catch (const zmq::error_t& e) {
      // A signal for the process interrupted the wait: nothing is lost, go round again.
      if (e.num() != EINTR) throw;
    }
    request_resyncs();
  }
}

void KvEventSubscriber::receive_all() {
  for (int m = 0; m < kMessagesPerTurn; ++m) {
    std::vector<std::string> frames;
    size_t n_frames = 0;
    bool more = true;
    while (more) {
      zmq::message_t part;
      // Nothing more queued (multipart messages arrive whole, so this is never mid-message).
      if (!socket_->recv(part, zmq::recv_flags::dontwait)) return;
      if (n_frames++ < kFrames) frames.emplace_back(part.data<char>(), part.size());
      more = part.more();
    }
    receive_one(frames, n_frames);
  }
}

void KvEventSubscriber::receive_one(const std::vector<std::string>& frames, size_t n_frames) {
  const std::optional<std::string> id = engine_of_topic(frames[0]);
  if (!id) return;
  std::string error;
  std::optional<uint64_t> seq;
  std::vector<KvEvent> events;
  if (n_frames != kFrames) {
    error = fmt::format("a message of {} frames (want 3: topic, sequence number, payload)", n_frames);
  } else if (!(seq = decode_seq(frames[1]))) {
    error = fmt::format("a sequence number of {} bytes (want 8)", frames[1].size());
  } else {
    try {
      events = decode_events(frames[2]);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  bool lost;
  {
    std::unique_lock lk(index_mu_);
    if (!index_.has(*id)) return;  // a topic that only starts like a subscribed one
    lost = error.empty() ? index_.apply(*id, *seq, events) : index_.lose_sync(*id);
  }
  if (!error.empty()) spdlog::warn("KV events from {}: {}; asking for a snapshot", *id, error);
  if (lost) {
    std::lock_guard lk(mu_);
    asked_.erase(*id);
  }
}

void KvEventSubscriber::request_resyncs() {
  std::vector<std::string> out;
  {
    std::shared_lock lk(index_mu_);
    out = index_.out_of_sync();
  }
  std::vector<std::string> due;
  const Clock::time_point now = Clock::now();
  {
    std::lock_guard lk(mu_);
    for (const std::string& id : out) {
      const auto it = asked_.find(id);
      if (it != asked_.end() && now - it->second < config_.resync_retry) continue;
      asked_[id] = now;
      due.push_back(id);
    }
  }
  for (const std::string& id : due) {
    try {
      on_resync_(id);
    } catch (const std::exception& e) {
      spdlog::warn("KV events: asking for a snapshot of {} failed: {}; asking again in {} ms", id, e.what(),
                   config_.resync_retry.count());
    }
  }
}

}  // namespace moe::kv_events
