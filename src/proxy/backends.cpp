#include "proxy/backends.h"

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/this_coro.hpp>

#include "http/deadline.h"

namespace moe::proxy {

namespace {

std::vector<Backend> parse_list(const std::vector<std::string>& urls, const char* flag) {
  if (urls.empty()) fail("{}: give at least one instance URL (http://HOST:PORT)", flag);
  std::vector<Backend> out;
  for (const std::string& url : urls) {
    std::string given = url;
    while (given.ends_with('/')) given.pop_back();
    try {
      out.push_back(Backend{given, http::parse_url(given)});
    } catch (const Error& e) {
      fail("{}: {}", flag, e.what());
    }
  }
  return out;
}

// 0 when the instance cannot be reached or breaks off: a probe reports, it never throws.
asio::awaitable<int> health_status(http::HttpClient& client) {
  http::HttpRequest request;
  request.method = "GET";
  request.target = "/health";
  try {
    const http::HttpResponse r = co_await client.fetch(std::move(request));
    co_return r.status;
  } catch (const std::exception&) {
    co_return 0;
  }
}

asio::awaitable<bool> probe(http::Url base, std::chrono::milliseconds timeout) {
  http::HttpClient client(co_await asio::this_coro::executor, std::move(base), http::HttpClientOptions{timeout});
  const std::optional<int> status = co_await http::within(timeout, health_status(client));
  co_return status && *status == 200;
}

}  // namespace

size_t pick_prefill(uint64_t turn, size_t n) { return size_t(turn % n); }
size_t pick_decode(uint64_t turn, size_t n) { return size_t(turn % n); }

Backends::Backends(const std::vector<std::string>& prefill, const std::vector<std::string>& decode)
    : prefill_(parse_list(prefill, "--prefill")), decode_(parse_list(decode, "--decode")) {}

const Backend& Backends::next_prefill() { return prefill_[pick_prefill(prefill_turn_++, prefill_.size())]; }
const Backend& Backends::next_decode() { return decode_[pick_decode(decode_turn_++, decode_.size())]; }

bool Health::ready() const {
  const auto up = [](const std::vector<bool>& v) { return std::find(v.begin(), v.end(), true) != v.end(); };
  return up(prefill) && up(decode);
}

asio::awaitable<Health> probe_health(const Backends& backends, std::chrono::milliseconds timeout) {
  const auto ex = co_await asio::this_coro::executor;
  using Probe = decltype(asio::co_spawn(ex, probe(http::Url{}, timeout), asio::deferred));
  std::vector<Probe> probes;
  for (const auto* list : {&backends.prefill(), &backends.decode()}) {
    for (const Backend& b : *list) probes.push_back(asio::co_spawn(ex, probe(b.base, timeout), asio::deferred));
  }
  auto [order, errors, healthy] = co_await asio::experimental::make_parallel_group(std::move(probes))
                                      .async_wait(asio::experimental::wait_for_all(), asio::use_awaitable);
  const size_t n_prefill = backends.prefill().size();
  Health h;
  h.prefill.assign(healthy.begin(), healthy.begin() + std::ptrdiff_t(n_prefill));
  h.decode.assign(healthy.begin() + std::ptrdiff_t(n_prefill), healthy.end());
  co_return h;
}

}  // namespace moe::proxy
