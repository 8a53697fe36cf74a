#pragma once
// Racing an operation against a clock: the operation is cancelled when the deadline comes.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <optional>
#include <variant>

#include "http/types.h"

namespace moe::http {

// op's result, or nullopt when `limit` passed first (op was then cancelled).
template <class T>
asio::awaitable<std::optional<T>> within(std::chrono::milliseconds limit, asio::awaitable<T> op) {
  using namespace asio::experimental::awaitable_operators;
  asio::steady_timer timer(co_await asio::this_coro::executor, limit);
  auto r = co_await (std::move(op) || timer.async_wait(asio::as_tuple(asio::use_awaitable)));
  if (r.index() == 0) co_return std::get<0>(std::move(r));
  co_return std::nullopt;
}

}  // namespace moe::http
