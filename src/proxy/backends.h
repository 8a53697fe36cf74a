#pragma once
// The prefill (P) and decode (D) instances behind the proxy: which one takes the next
// request, and whether each answers its health check.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "http/http_client.h"
#include "http/types.h"

namespace moe::proxy {

namespace asio = boost::asio;

struct Backend {
  std::string url;  // as given, without trailing '/': what messages and /health name it by
  http::Url base;
};

// The instance of a stage that takes that stage's turn-th request: round robin. One
// function per stage, so that either can become a real policy on its own.
size_t pick_prefill(uint64_t turn, size_t n);
size_t pick_decode(uint64_t turn, size_t n);

class Backends {
 public:
  // Throws moe::Error for an empty list or a URL that is not http://HOST[:PORT].
  Backends(const std::vector<std::string>& prefill, const std::vector<std::string>& decode);

  // Any thread.
  const Backend& next_prefill();
  const Backend& next_decode();

  const std::vector<Backend>& prefill() const { return prefill_; }
  const std::vector<Backend>& decode() const { return decode_; }

 private:
  std::vector<Backend> prefill_, decode_;
  std::atomic<uint64_t> prefill_turn_{0}, decode_turn_{0};
};

struct Health {
  std::vector<bool> prefill, decode;  // per instance, in the order given
  // At least one P and one D answer: the proxy can serve.
  bool ready() const;
};

// Asks every instance's GET /health at once; healthy is a 200 within `timeout`.
asio::awaitable<Health> probe_health(const Backends& backends, std::chrono::milliseconds timeout);

}  // namespace moe::proxy
