#pragma once
// The backend every target of the benchmark ends at: an HttpServer that answers
// POST /v1/completions at once with canned tokens, whole or streamed (SSE), in the shapes
// `moengine serve` uses, so that what differs between the targets is only what sits in
// front of it. It also speaks the P/D protocol as a unified instance with a KV transport
// would, so the moengine proxy can run either leg at it: a request with
// kv_transfer_params {"do_remote_decode": true} gets the first token and a hand-off, one
// with a hand-off (do_remote_prefill) the rest of the answer. GET /health answers 200,
// POST /internal/kv/release {}.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "http/server.h"

namespace moe::bench {

struct StubConfig {
  int output_tokens = 16;  // tokens of every answer, the P/D legs' together
  int io_threads = 2;
};

// How many completion requests of each kind the stub has answered: a request through a
// single-hop front is one `whole`; through the P/D path one `prefill` plus one `decode`.
struct StubCounts {
  uint64_t whole = 0, prefill = 0, decode = 0;
  uint64_t total() const { return whole + prefill + decode; }
};

class StubBackend {
 public:
  // Listens on a free port of 127.0.0.1; throws moe::Error when it cannot.
  explicit StubBackend(StubConfig config);
  ~StubBackend();
  StubBackend(const StubBackend&) = delete;
  StubBackend& operator=(const StubBackend&) = delete;

  unsigned short port() const { return server_->port(); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port()); }
  StubCounts counts() const { return {whole_.load(), prefill_.load(), decode_.load()}; }
  // The text of every whole answer, and of a P answer followed by its D answer.
  std::string expected_text() const;

 private:
  http::asio::awaitable<void> completions(http::Exchange& ex);

  const StubConfig config_;
  std::unique_ptr<http::HttpServer> server_;
  std::atomic<uint64_t> whole_{0}, prefill_{0}, decode_{0};
};

}  // namespace moe::bench
