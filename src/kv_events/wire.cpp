#include "kv_events/wire.h"

#include <fmt/format.h>

#include <limits>

#include "core/error.h"

namespace moe::kv_events {

using nlohmann::json;

namespace {

// Values from the network are named in errors by a short excerpt: enough to recognise them,
// never megabytes of payload.
std::string excerpt(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 40 ? s.substr(0, 40) + "..." : s;
}

json hash_array(const std::vector<uint64_t>& hashes) {
  json a = json::array();
  for (uint64_t h : hashes) a.push_back(hash_hex(h));
  return a;
}

std::vector<uint64_t> parse_hashes(const json& obj, const std::string& where, bool allow_empty) {
  const auto it = obj.find("hashes");
  if (it == obj.end() || !it->is_array()) fail("{}: \"hashes\" must be an array of hex strings", where);
  if (it->empty() && !allow_empty) fail("{}: \"hashes\" is empty", where);
  std::vector<uint64_t> hashes;
  hashes.reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const json& h = (*it)[i];
    const std::string name = fmt::format("{}: \"hashes\"[{}]", where, i);
    if (!h.is_string()) fail("{} must be a string of 16 hex digits, got {}", name, excerpt(h));
    hashes.push_back(parse_hash_hex(h.get_ref<const std::string&>(), name));
  }
  return hashes;
}

int32_t parse_block_size(const json& obj, const std::string& where) {
  const auto it = obj.find("block_size");
  if (it == obj.end() || !it->is_number_integer()) fail("{}: \"block_size\" must be an integer", where);
  const int64_t bs = it->get<int64_t>();
  if (bs < 1 || bs > std::numeric_limits<int32_t>::max()) fail("{}: \"block_size\" must be in [1, 2^31), got {}", where, bs);
  return int32_t(bs);
}

json parse_object(std::string_view text, std::string_view what) {
  if (text.size() > kMaxPayloadBytes) fail("{} is {} bytes, over the limit of {}", what, text.size(), kMaxPayloadBytes);
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    fail("{} is not JSON: {}", what, e.what());
  }
  if (!doc.is_object()) fail("{} must be a JSON object, got {}", what, excerpt(doc));
  return doc;
}

}  // namespace

std::string topic_of(std::string_view engine_id) { return std::string(kTopicPrefix) + std::string(engine_id); }

std::optional<std::string> engine_of_topic(std::string_view topic) {
  if (!topic.starts_with(kTopicPrefix)) return std::nullopt;
  return std::string(topic.substr(kTopicPrefix.size()));
}

std::string encode_seq(uint64_t seq) {
  std::string frame(8, '\0');
  for (int i = 0; i < 8; ++i) frame[size_t(i)] = char(uint8_t(seq >> (8 * (7 - i))));
  return frame;
}

std::optional<uint64_t> decode_seq(std::string_view frame) {
  if (frame.size() != 8) return std::nullopt;
  uint64_t seq = 0;
  for (char c : frame) seq = (seq << 8) | uint8_t(c);
  return seq;
}

std::string hash_hex(uint64_t hash) { return fmt::format("{:016x}", hash); }

uint64_t parse_hash_hex(std::string_view hex, std::string_view what) {
  uint64_t v = 0;
  bool ok = hex.size() == 16;
  for (size_t i = 0; ok && i < hex.size(); ++i) {
    const char c = hex[i];
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    ok = d >= 0;
    v = (v << 4) | uint64_t(d & 0xf);
  }
  if (!ok) fail("{} must be 16 hex digits, got \"{}\"", what, hex.size() > 40 ? std::string(hex.substr(0, 40)) + "..." : std::string(hex));
  return v;
}

std::string encode_events(std::span<const KvEvent> events) {
  json list = json::array();
  for (const KvEvent& e : events) {
    if (const auto* s = std::get_if<BlocksStored>(&e)) {
      list.push_back({{"type", "stored"},
                      {"parent", s->parent ? json(hash_hex(*s->parent)) : json(nullptr)},
                      {"hashes", hash_array(s->hashes)},
                      {"block_size", s->block_size}});
    } else if (const auto* r = std::get_if<BlocksRemoved>(&e)) {
      list.push_back({{"type", "removed"}, {"hashes", hash_array(r->hashes)}});
    } else {
      list.push_back({{"type", "cleared"}});
    }
  }
  return json{{"events", std::move(list)}}.dump();
}

std::vector<KvEvent> decode_events(std::string_view payload) {
  const json doc = parse_object(payload, "KV event payload");
  const auto list = doc.find("events");
  if (list == doc.end() || !list->is_array()) fail("KV event payload: \"events\" must be an array");
  std::vector<KvEvent> events;
  events.reserve(list->size());
  for (size_t i = 0; i < list->size(); ++i) {
    const json& e = (*list)[i];
    const std::string where = fmt::format("KV event {}", i);
    if (!e.is_object()) fail("{} must be an object, got {}", where, excerpt(e));
    const auto type = e.find("type");
    if (type == e.end() || !type->is_string()) fail("{}: \"type\" must be a string", where);
    const std::string& t = type->get_ref<const std::string&>();
    if (t == "stored") {
      BlocksStored s;
      const auto parent = e.find("parent");
      if (parent != e.end() && !parent->is_null()) {
        if (!parent->is_string()) fail("{}: \"parent\" must be null or a string of 16 hex digits, got {}", where, excerpt(*parent));
        s.parent = parse_hash_hex(parent->get_ref<const std::string&>(), where + ": \"parent\"");
      }
      s.hashes = parse_hashes(e, where, false);
      s.block_size = parse_block_size(e, where);
      events.emplace_back(std::move(s));
    } else if (t == "removed") {
      events.emplace_back(BlocksRemoved{parse_hashes(e, where, false)});
    } else if (t == "cleared") {
      events.emplace_back(AllCleared{});
    } else {
      fail("{}: unknown type \"{}\" (stored, removed or cleared)", where, t.size() > 40 ? t.substr(0, 40) + "..." : t);
    }
  }
  return events;
}

json snapshot_json(std::string_view engine_id, const KvSnapshot& snapshot) {
  return {{"engine_id", engine_id}, {"seq", snapshot.seq}, {"block_size", snapshot.block_size}, {"hashes", hash_array(snapshot.hashes)}};
}

NamedSnapshot decode_snapshot(std::string_view body) {
  const json doc = parse_object(body, "KV block snapshot");
  NamedSnapshot out;
  const auto id = doc.find("engine_id");
  if (id == doc.end() || !id->is_string()) fail("KV block snapshot: \"engine_id\" must be a string");
  out.engine_id = id->get<std::string>();
  const auto seq = doc.find("seq");
  if (seq == doc.end() || !seq->is_number_unsigned()) fail("KV block snapshot: \"seq\" must be an integer >= 0");
  out.snapshot.seq = seq->get<uint64_t>();
  out.snapshot.block_size = parse_block_size(doc, "KV block snapshot");
  out.snapshot.hashes = parse_hashes(doc, "KV block snapshot", true);
  return out;
}

}  // namespace moe::kv_events
