// libFuzzer target for the KV-events wire format (src/kv_events/wire.h): the payloads a
// subscriber takes from any publisher and the snapshots it fetches. Every decode must
// succeed or throw moe::Error, nothing may crash, and what decodes must encode to bytes
// that decode to the same value.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "kv_events/wire.h"

namespace {

namespace kv = moe::kv_events;

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "kv_events_fuzz: %s\n", what);
  std::abort();
}

void events(std::string_view bytes) {
  std::vector<kv::KvEvent> decoded;
  try {
    decoded = kv::decode_events(bytes);
  } catch (const moe::Error&) {
    return;
  }
  check(kv::decode_events(kv::encode_events(decoded)) == decoded, "events do not survive encoding");
}

void snapshot(std::string_view bytes) {
  kv::NamedSnapshot decoded;
  try {
    decoded = kv::decode_snapshot(bytes);
  } catch (const moe::Error&) {
    return;
  }
  const kv::NamedSnapshot again = kv::decode_snapshot(kv::snapshot_json(decoded.engine_id, decoded.snapshot).dump());
  check(again.engine_id == decoded.engine_id && again.snapshot.seq == decoded.snapshot.seq &&
            again.snapshot.block_size == decoded.snapshot.block_size && again.snapshot.hashes == decoded.snapshot.hashes,
        "a snapshot does not survive encoding");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  events(bytes);
  snapshot(bytes);
  if (size == 8) check(kv::encode_seq(*kv::decode_seq(bytes)) == bytes, "a sequence number does not survive encoding");
  return 0;
}
