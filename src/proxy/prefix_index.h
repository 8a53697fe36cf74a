#pragma once
// Which instance holds how much of a prompt in its prefix cache, from the KV events the
// instances publish (kv_events/subscriber.h): the routing policies' matched_prefix_tokens.
// An instance whose GET /health names a KV-events endpoint is subscribed to as the health
// monitor finds it; its snapshots come from its GET /internal/kv/blocks, fetched on a
// thread of the index's own.
#include <boost/asio/io_context.hpp>
#include <boost/asio/executor_work_guard.hpp>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kv_events/subscriber.h"
#include "proxy/registry.h"

namespace moe::proxy {

class PrefixIndex {
 public:
  PrefixIndex();
  ~PrefixIndex();
  PrefixIndex(const PrefixIndex&) = delete;
  PrefixIndex& operator=(const PrefixIndex&) = delete;

  // What a probe of `instance` said: subscribes to a newly named endpoint (the host of an
  // endpoint bound to every address is taken from the instance's URL).
  void on_probe(const Instance& instance, const HealthReport& report);

  // For each instance that publishes events, the prompt tokens of `prompt` it holds (whole
  // blocks of its block size), by instance name; others are absent (nothing known: 0).
  // Blocks of prompts routed there in the last kRoutedFor count as held (note_routed).
  std::map<std::string, int64_t> matched_tokens(std::span<const int32_t> prompt) const;

  // A prompt just routed to `instance` to be prefilled there: its blocks count as held
  // there until the instance's own events cover them (at most kRoutedFor, for a prefill
  // that never ends), so that requests sharing a new prefix that arrive before those events
  // still find where it is being computed.
  void note_routed(const std::string& instance, std::span<const int32_t> prompt);
  static constexpr std::chrono::seconds kRoutedFor{10};

  // The instance's KV-events state for /health: {"engine_id", "endpoint", "synced",
  // "blocks"}; null when it publishes none.
  nlohmann::json describe(const std::string& instance) const;

 private:
  void fetch_snapshot(const std::string& engine_id);

  struct Source {
    std::string engine_id, endpoint;
    http::Url base;
  };
  // Blocks of prompts routed to an instance (note_routed), each until it expires; the
  // queue holds them in the order they expire.
  struct Routed {
    std::unordered_map<uint64_t, std::chrono::steady_clock::time_point> until;
    std::deque<std::pair<std::chrono::steady_clock::time_point, std::vector<uint64_t>>> queue;
  };
  // Leading blocks of `hashes` that `r` holds, at `now`.
  static size_t routed_blocks(const Routed& r, const std::vector<uint64_t>& hashes, std::chrono::steady_clock::time_point now);

  mutable std::mutex mu_;
  mutable std::map<std::string, Routed> routed_;  // by instance name; matching drops what events cover
  std::map<std::string, Source> by_instance_;   // instance name -> its source
  std::map<std::string, http::Url> by_engine_;  // engine id -> where its snapshot is

  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
  std::unique_ptr<kv_events::KvEventSubscriber> subscriber_;  // last: its callback uses the above
};

}  // namespace moe::proxy
