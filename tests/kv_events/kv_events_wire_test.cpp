// The KV-events wire format: events and snapshots survive encoding, sequence numbers are
// big-endian, and every malformed payload is refused with a message naming what is wrong.
#include "kv_events/wire.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace moe::kv_events {
namespace {

std::string error_of(std::string_view payload) {
  try {
    decode_events(payload);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(KvWire, EventsRoundTrip) {
  const std::vector<KvEvent> events{
      AllCleared{},
      BlocksStored{std::nullopt, {0x0123456789abcdefull, 0xffffffffffffffffull}, 16},
      BlocksStored{0xfedcba9876543210ull, {0, 42}, 32},
      BlocksRemoved{{0xffffffffffffffffull, 7}},
  };
  const std::string payload = encode_events(events);
  EXPECT_EQ(decode_events(payload), events);
  // Hashes travel as hex strings, never as JSON numbers that lose their low bits.
  EXPECT_NE(payload.find("\"ffffffffffffffff\""), std::string::npos) << payload;
  EXPECT_NE(payload.find("\"parent\":null"), std::string::npos) << payload;
  EXPECT_EQ(decode_events(encode_events({})), std::vector<KvEvent>{});
}

TEST(KvWire, SequenceNumbersAreEightBytesBigEndian) {
  EXPECT_EQ(encode_seq(0x0102030405060708ull), std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
  EXPECT_EQ(decode_seq(encode_seq(1)), 1u);
  EXPECT_EQ(decode_seq(encode_seq(~0ull)), ~0ull);
  EXPECT_EQ(decode_seq("1234567"), std::nullopt);
  EXPECT_EQ(decode_seq("123456789"), std::nullopt);
}

TEST(KvWire, TopicsNameTheEngine) {
  EXPECT_EQ(topic_of("moe-1"), "kv@moe-1");
  EXPECT_EQ(engine_of_topic("kv@moe-1"), "moe-1");
  EXPECT_EQ(engine_of_topic("metrics@moe-1"), std::nullopt);
}

TEST(KvWire, HashHexIsExactlySixteenDigits) {
  EXPECT_EQ(hash_hex(0xabc), "0000000000000abc");
  EXPECT_EQ(parse_hash_hex("0000000000000ABC", "h"), 0xabcu);
  EXPECT_THROW(parse_hash_hex("abc", "h"), Error);
  EXPECT_THROW(parse_hash_hex("000000000000000g", "h"), Error);
  EXPECT_THROW(parse_hash_hex("00000000000000000", "h"), Error);
  EXPECT_THROW(parse_hash_hex("-000000000000001", "h"), Error);
}

TEST(KvWire, MalformedPayloadsAreRefusedWithTheReason) {
  EXPECT_NE(error_of("{").find("not JSON"), std::string::npos);
  EXPECT_NE(error_of("[]").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(error_of("{}").find("\"events\" must be an array"), std::string::npos);
  EXPECT_NE(error_of(R"({"events":[1]})").find("KV event 0 must be an object"), std::string::npos);
  EXPECT_NE(error_of(R"({"events":[{"type":"moved"}]})").find("unknown type \"moved\""), std::string::npos);
  EXPECT_NE(error_of(R"({"events":[{"type":"removed","hashes":[]}]})").find("\"hashes\" is empty"), std::string::npos);
  EXPECT_NE(error_of(R"({"events":[{"type":"removed","hashes":[12]}]})").find("\"hashes\"[0] must be a string"), std::string::npos);
  EXPECT_NE(error_of(R"({"events":[{"type":"stored","hashes":["0000000000000001"]}]})").find("\"block_size\" must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"events":[{"type":"stored","hashes":["0000000000000001"],"block_size":0}]})").find("[1, 2^31)"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"events":[{"type":"stored","parent":5,"hashes":["0000000000000001"],"block_size":4}]})").find("\"parent\""),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kMaxPayloadBytes + 1, ' ')).find("over the limit"), std::string::npos);
}

TEST(KvWire, SnapshotRoundTrip) {
  const KvSnapshot snap{17, 16, {1, 0xffffffffffffffffull}};
  const std::string body = snapshot_json("moe-a", snap).dump();
  const NamedSnapshot back = decode_snapshot(body);
  EXPECT_EQ(back.engine_id, "moe-a");
  EXPECT_EQ(back.snapshot.seq, 17u);
  EXPECT_EQ(back.snapshot.block_size, 16);
  EXPECT_EQ(back.snapshot.hashes, snap.hashes);
  EXPECT_EQ(decode_snapshot(R"({"engine_id":"e","seq":0,"block_size":4,"hashes":[]})").snapshot.hashes.size(), 0u);
  EXPECT_THROW(decode_snapshot(R"({"engine_id":"e","seq":-1,"block_size":4,"hashes":[]})"), Error);
  EXPECT_THROW(decode_snapshot(R"({"seq":0,"block_size":4,"hashes":[]})"), Error);
}

}  // namespace
}  // namespace moe::kv_events
