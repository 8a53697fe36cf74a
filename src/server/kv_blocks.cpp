// GET /internal/kv/blocks: the snapshot a KV-events subscriber resyncs from
// (docs/kv_events.md). The engine thread takes it between two steps, so it agrees exactly
// with the messages numbered up to its seq; the handler waits for it without blocking its
// I/O thread.
#include <boost/asio/this_coro.hpp>

#include "http/mailbox.h"
#include "kv_events/wire.h"
#include "server/api_error.h"
#include "server/openai_server.h"

namespace moe::server {

asio::awaitable<void> OpenAiServer::kv_blocks(http::Exchange& ex) {
  if (!engine_.publishes_kv_events()) {
    co_await ex.respond(error_response(kv_events_off("this instance publishes no KV events: start it with --kv-events-endpoint")));
    co_return;
  }
  auto mailbox = std::make_shared<http::Mailbox<kv_events::KvSnapshot>>(co_await asio::this_coro::executor);
  if (!engine_.kv_snapshot([mailbox](kv_events::KvSnapshot s) { mailbox->push(std::move(s)); })) {
    co_await ex.respond(error_response(internal_error("the engine is stopping")));
    co_return;
  }
  const std::optional<std::vector<kv_events::KvSnapshot>> snap = co_await ex.unless_client_gone(mailbox->receive());
  mailbox->close();
  if (!snap || snap->empty()) co_return;
  co_await ex.respond(json_response(kv_events::snapshot_json(config_.engine_id, snap->front()).dump()));
}

}  // namespace moe::server
