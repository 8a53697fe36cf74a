#pragma once
// The KV-events wire format (docs/kv_events.md). Each ZeroMQ message has three frames:
//   1. topic    "kv@<engine_id>"
//   2. seq      8 bytes, big-endian: 1 for a publisher's first message, +1 for each next
//   3. payload  compact JSON: {"events": [event, ...]}, one engine step's events in order
// Block hashes travel as 16 lowercase hex digits: JSON numbers lose 64-bit integers in
// JavaScript and in any double-based parser.
//
// The decoders take bytes from the network: each returns the value or throws Error saying
// what is wrong, whatever the input.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kv_events/events.h"

namespace moe::kv_events {

inline constexpr std::string_view kTopicPrefix = "kv@";
// Larger payloads are refused by decode_events and by the subscriber's socket.
inline constexpr size_t kMaxPayloadBytes = size_t(64) << 20;

std::string topic_of(std::string_view engine_id);
// The engine id a topic names; nullopt when it is not a KV-events topic.
std::optional<std::string> engine_of_topic(std::string_view topic);

std::string encode_seq(uint64_t seq);
// nullopt unless the frame is exactly 8 bytes.
std::optional<uint64_t> decode_seq(std::string_view frame);

std::string hash_hex(uint64_t hash);
// Exactly 16 hex digits (either case); what names the value in the error.
uint64_t parse_hash_hex(std::string_view hex, std::string_view what);

std::string encode_events(std::span<const KvEvent> events);
std::vector<KvEvent> decode_events(std::string_view payload);

// GET /internal/kv/blocks: {"engine_id", "seq", "block_size", "hashes": [hex, ...]}.
nlohmann::json snapshot_json(std::string_view engine_id, const KvSnapshot& snapshot);
struct NamedSnapshot {
  std::string engine_id;
  KvSnapshot snapshot;
};
NamedSnapshot decode_snapshot(std::string_view body);

}  // namespace moe::kv_events
