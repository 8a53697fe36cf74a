#pragma once
// A thread-safe hand-off from a producer thread (the engine) to one coroutine on an I/O
// executor. push() never blocks on I/O: it queues under a short lock and posts a wake-up to
// the consumer's executor, which must be the executor (or strand) the consumer runs on, so
// the wake-up and the consumer's check of the queue never interleave.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "http/types.h"

namespace moe::http {

template <class T>
class Mailbox : public std::enable_shared_from_this<Mailbox<T>> {
 public:
  explicit Mailbox(asio::any_io_executor consumer) : ex_(consumer), wake_(consumer) {}

  // Any thread. False (and the item dropped) once the consumer has closed the mailbox.
  bool push(T item) {
    {
      std::lock_guard lock(mu_);
      if (closed_) return false;
      items_.push_back(std::move(item));
      if (wake_posted_) return true;
      wake_posted_ = true;
    }
    asio::post(ex_, [self = this->shared_from_this()] { self->wake_.cancel(); });
    return true;
  }

  // Any thread. Later pushes are dropped, so a producer that outlives the consumer never
  // touches its executor again.
  void close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    items_.clear();
  }

  // On the consumer's executor: everything queued, waiting for at least one item. When the
  // waiting coroutine is cancelled (e.g. it lost a race with another operation) it returns
  // empty without taking anything.
  asio::awaitable<std::vector<T>> receive() {
    for (;;) {
      {
        std::lock_guard lock(mu_);
        wake_posted_ = false;
        if (!items_.empty()) {
          std::vector<T> out(std::make_move_iterator(items_.begin()), std::make_move_iterator(items_.end()));
          items_.clear();
          co_return out;
        }
      }
      wake_.expires_at(asio::steady_timer::time_point::max());
      co_await wake_.async_wait(asio::as_tuple(asio::use_awaitable));
      auto cs = co_await asio::this_coro::cancellation_state;
      if (cs.cancelled() != asio::cancellation_type::none) co_return std::vector<T>{};
    }
  }

 private:
  asio::any_io_executor ex_;
  asio::steady_timer wake_;  // waited on with no deadline; a push cancels the wait
  std::mutex mu_;
  std::deque<T> items_;
  bool closed_ = false;
  bool wake_posted_ = false;
};

}  // namespace moe::http
