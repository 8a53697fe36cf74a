#include "http/connection_pool.h"

#include <algorithm>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/query.hpp>

namespace moe::http {

namespace asio = boost::asio;

namespace {

// One per context: the pools holding idle connections it runs, told as it shuts down (its
// services shut down newest first, so this one before the sockets' own).
class PoolsOfContext : public asio::execution_context::service {
 public:
  static inline asio::execution_context::id id;
  explicit PoolsOfContext(asio::execution_context& context) : service(context) {}

  void watch(const std::shared_ptr<ConnectionPool>& pool) {
    std::lock_guard lock(mutex_);
    std::erase_if(pools_, [](const std::weak_ptr<ConnectionPool>& p) { return p.expired(); });
    pools_.push_back(pool);
  }

 private:
  void shutdown() override {
    std::vector<std::weak_ptr<ConnectionPool>> pools;
    {
      std::lock_guard lock(mutex_);
      pools.swap(pools_);
    }
    for (const auto& weak : pools) {
      if (const auto pool = weak.lock()) pool->drop(context());
    }
  }

  std::mutex mutex_;
  std::vector<std::weak_ptr<ConnectionPool>> pools_;
};

asio::execution_context& context_of(boost::beast::tcp_stream& stream) {
  return asio::query(stream.get_executor(), asio::execution::context);
}

}  // namespace

std::unique_ptr<boost::beast::tcp_stream> ConnectionPool::take(asio::execution_context& context) {
  std::lock_guard lock(mutex_);
  for (auto it = idle_.rbegin(); it != idle_.rend(); ++it) {
    if (it->context != &context) continue;
    auto stream = std::move(it->stream);
    idle_.erase(std::next(it).base());
    return stream;
  }
  return nullptr;
}

void ConnectionPool::put(std::unique_ptr<boost::beast::tcp_stream> stream) {
  asio::execution_context& context = context_of(*stream);
  bool watch = false;
  {
    std::lock_guard lock(mutex_);
    if (idle_.size() >= max_idle_) return;
    idle_.push_back({&context, std::move(stream)});
    if (std::find(watched_.begin(), watched_.end(), &context) == watched_.end()) {
      watched_.push_back(&context);
      watch = true;
    }
  }
  if (watch) asio::use_service<PoolsOfContext>(context).watch(shared_from_this());
}

void ConnectionPool::drop(asio::execution_context& context) {
  std::vector<Idle> closing;
  {
    std::lock_guard lock(mutex_);
    std::erase(watched_, &context);
    for (Idle& i : idle_) {
      if (i.context == &context) closing.push_back(std::move(i));
    }
    std::erase_if(idle_, [](const Idle& i) { return !i.stream; });
  }
}

}  // namespace moe::http
