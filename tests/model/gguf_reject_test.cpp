// Hostile and corrupt GGUF files: each is rejected with a message naming the file and the field.
#include "model/gguf.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "gguf_test_util.h"

namespace moe {
namespace {

using namespace gguf_testing;
TEST(GgufReject, BadMagic) {
  Bytes b = two_tensors();
  b[3] = 'X';
  EXPECT_REJECTED(b, "t.gguf: header: bad magic \"GGUX\" (47 47 55 58) (expected \"GGUF\")");
}

TEST(GgufReject, Version1) {
  Bytes b = two_tensors();
  poke<uint32_t>(b, 4, 1);
  EXPECT_REJECTED(b, "header: GGUF version 1 is not supported (only 2 and 3)");
}

TEST(GgufReject, UnsupportedVersion) {
  Bytes b = two_tensors();
  poke<uint32_t>(b, 4, 7);
  EXPECT_REJECTED(b, "header: unsupported GGUF version 7 (supported: 2, 3)");
  poke<uint32_t>(b, 4, 0x03000000);
  EXPECT_REJECTED(b, "big-endian GGUF file");
}

TEST(GgufReject, Truncated) {
  EXPECT_REJECTED(Bytes{}, "header: truncated at byte 0 reading magic (needs 4 bytes, 0 left)");
  Bytes b = two_tensors();
  b.resize(12);
  EXPECT_REJECTED(b, "header: truncated at byte 8 reading tensor_count (needs 8 bytes, 4 left)");

  GgufWriter w;
  w.set_u32("a", 1);
  w.set_string("general.name", std::string(100, 'x'));
  b = w.to_bytes();
  b.resize(type_at(b, "general.name") + 4 + 8 + 10);
  EXPECT_REJECTED(
      b, "metadata 'general.name': string value length 100 cannot fit in the remaining 10 bytes");

  w.set_array_string("tok", std::vector<std::string>(10, "0123456789"));
  b = w.to_bytes();
  const size_t ninth = type_at(b, "tok") + 4 + 4 + 8 + 8 * 18;  // 8 strings of 8 + 10 bytes
  b.resize(ninth + 8 + 3);
  EXPECT_REJECTED(b, "metadata 'tok': element[8] length 10 cannot fit in the remaining 3 bytes");
  b.resize(ninth + 5);
  EXPECT_REJECTED(b, "metadata 'tok': truncated at byte " + std::to_string(ninth) +
                         " reading the length of element[8] (needs 8 bytes, 5 left)");
}

TEST(GgufReject, TruncatedAnywhere) {
  GgufWriter w = every_scalar();
  w.set_array_string("tok", {"a", "bc", "def"});
  w.set_array_f32("scores", {1, 2, 3});
  w.add_tensor("t.a", GgmlType::Q8_0, {32, 2}, pattern(1));
  w.add_tensor("t.b", GgmlType::F32, {8}, pattern(2));
  const Bytes full = w.to_bytes();
  GgufFile f("t.gguf", full.data(), full.size());
  const size_t data_end = f.data_offset() + f.tensors()[1].offset + f.tensors()[1].n_bytes;
  for (size_t n = 0; n < data_end; ++n) {
    const Bytes b(full.begin(), full.begin() + long(n));
    const std::string msg = parse_error(b);
    ASSERT_EQ(msg.rfind("t.gguf: ", 0), 0u) << "prefix of " << n << " bytes: '" << msg << "'";
  }
  // Padding after the last tensor is not needed to read it.
  EXPECT_EQ(parse_error(Bytes(full.begin(), full.begin() + long(data_end))), "");
}

TEST(GgufReject, AbsurdCounts) {
  Bytes b = two_tensors();
  poke<uint64_t>(b, 8, uint64_t(1) << 40);
  EXPECT_REJECTED(b, "header: tensor_count 1099511627776 cannot fit in the remaining");
  b = two_tensors();
  poke<uint64_t>(b, 16, uint64_t(1) << 40);
  EXPECT_REJECTED(b, "header: kv_count 1099511627776 cannot fit in the remaining");
  b = two_tensors();
  poke<uint64_t>(b, find_bytes(b, "general.name") - 8, uint64_t(1) << 62);
  EXPECT_REJECTED(b,
                  "metadata entry #0: key length 4611686018427387904 cannot fit in the remaining");
  b = two_tensors();
  poke<uint64_t>(b, type_at(b, "general.name") + 4, uint64_t(1) << 62);
  EXPECT_REJECTED(b, "metadata 'general.name': string value length 4611686018427387904 cannot fit");
  b = two_tensors();
  poke<uint64_t>(b, find_bytes(b, "t.b") - 8, 1000);
  EXPECT_REJECTED(b, "tensor #1: name length 1000 cannot fit in the remaining");
}

TEST(GgufReject, HugeArrayCountFailsBeforeAllocating) {
  GgufWriter w;
  w.set_array_i32("big", {1, 2, 3});
  w.set_array_string("strs", {"x"});
  Bytes b = w.to_bytes();
  // 2^60 int32s would be 8 EiB once widened; the count check must come first.
  poke<uint64_t>(b, type_at(b, "big") + 8, uint64_t(1) << 60);
  EXPECT_REJECTED(b, "metadata 'big': array count 1152921504606846976 cannot fit in the remaining");
  b = w.to_bytes();
  poke<uint64_t>(b, type_at(b, "strs") + 8, uint64_t(1) << 40);
  EXPECT_REJECTED(b, "metadata 'strs': array count 1099511627776 cannot fit in the remaining");
}

TEST(GgufReject, BadValueTypes) {
  GgufWriter w;
  w.set_string("general.name", "x");
  w.set_array_i32("arr", {1});
  w.set_bool("flag", true);
  w.set_value("ids", {GgufValueType::ARRAY, int_array(GgufValueType::UINT64, {1})});
  const Bytes good = w.to_bytes();
  Bytes b = good;
  poke<uint32_t>(b, type_at(b, "general.name"), 13);
  EXPECT_REJECTED(b, "metadata 'general.name': unknown value type 13");
  b = good;
  poke<uint32_t>(b, type_at(b, "arr") + 4, 200);
  EXPECT_REJECTED(b, "metadata 'arr': unknown array element type 200");
  b = good;
  poke<uint32_t>(b, type_at(b, "arr") + 4, uint32_t(GgufValueType::ARRAY));
  EXPECT_REJECTED(b, "metadata 'arr': nested arrays are not supported");
  b = good;
  poke<uint8_t>(b, type_at(b, "flag") + 4, 2);
  EXPECT_REJECTED(b, "metadata 'flag': value is 2, but a bool must be 0 or 1");
  b = good;
  poke<uint64_t>(b, type_at(b, "ids") + 16, ~uint64_t(0));
  EXPECT_REJECTED(
      b, "metadata 'ids': element[0] is 18446744073709551615, which does not fit in int64");
}

TEST(GgufReject, BadTensorInfo) {
  const Bytes good = two_tensors();
  const size_t a = n_dims_at(good, "t.a");  // n_dims, ne[0], ne[1], type, offset
  Bytes b = good;
  poke<uint32_t>(b, a + 4 + 16, 99);
  EXPECT_REJECTED(b, "tensor 't.a': unknown tensor type id 99");
  b = good;
  poke<uint32_t>(b, a, 0);
  EXPECT_REJECTED(b, "tensor 't.a': n_dims 0 is out of range (1 to 4)");
  b = good;
  poke<uint32_t>(b, a, 5);
  EXPECT_REJECTED(b, "tensor 't.a': n_dims 5 is out of range (1 to 4)");
  b = good;
  poke<uint64_t>(b, a + 4 + 8, 0);
  EXPECT_REJECTED(b, "tensor 't.a': ne[1] is 0: every dimension must be positive");
  b = good;
  poke<int64_t>(b, a + 4, -5);
  EXPECT_REJECTED(b, "tensor 't.a': ne[0] is negative (-5)");
  b = good;
  poke<uint64_t>(b, a + 4, uint64_t(1) << 40);
  poke<uint64_t>(b, a + 4 + 8, uint64_t(1) << 40);
  EXPECT_REJECTED(
      b, "tensor 't.a': element count of shape [1099511627776, 1099511627776] overflows int64");
  b = good;
  poke<uint64_t>(b, a + 4, uint64_t(1) << 61);  // 2^62 elements fit int64, 2^64 bytes do not
  EXPECT_REJECTED(b, "tensor 't.a': size of shape [2305843009213693952, 2] in f32 overflows");

  GgufWriter w;
  w.add_tensor("q", GgmlType::Q8_0, {64}, pattern(1));
  b = w.to_bytes();
  poke<uint64_t>(b, n_dims_at(b, "q") + 4, 48);
  EXPECT_REJECTED(b, "tensor 'q': ne[0] = 48 is not a multiple of the q8_0 block size 32");
}

TEST(GgufReject, BadTensorPlacement) {
  const Bytes good = two_tensors();
  const size_t offset_b = n_dims_at(good, "t.b") + 4 + 8 + 4;
  Bytes b = good;
  poke<uint64_t>(b, offset_b, 72);
  EXPECT_REJECTED(b, "tensor 't.b': offset 72 is not a multiple of the alignment 32");
  b = good;
  poke<uint64_t>(b, offset_b, 4096);
  EXPECT_REJECTED(b,
                  fmt::format("t.gguf: tensor 't.b': offset 4096 + 64 bytes is past the end of the "
                              "file (size {}",
                              b.size()));
  b = good;
  poke<uint64_t>(b, offset_b, ~uint64_t(31));  // offset + size wraps around
  EXPECT_REJECTED(b, "tensor 't.b': offset 18446744073709551584 + 64 bytes is past the end");
  b = good;
  b.pop_back();
  EXPECT_REJECTED(b, "tensor 't.b': offset 64 + 64 bytes is past the end of the file");
  b = good;
  poke<uint64_t>(b, offset_b, 32);
  EXPECT_REJECTED(
      b, "t.gguf: tensor 't.b' (offset 32, 64 bytes) overlaps tensor 't.a' (offset 0, 64 bytes)");

  GgufWriter w;
  w.set_alignment(4096);
  w.add_tensor("x", GgmlType::F32, {4}, pattern(1));
  b = w.to_bytes();
  const size_t infos_end = n_dims_at(b, "x") + 4 + 8 + 4 + 8;
  b.resize(infos_end + 1);
  EXPECT_REJECTED(
      b, fmt::format("t.gguf: data section: padding the tensor infos (ending at byte {}) to "
                     "the alignment 4096 runs past the end of the file",
                     infos_end));
}

TEST(GgufReject, Duplicates) {
  GgufWriter w;
  w.set_u32("dup.a", 1);
  w.set_u32("dup.b", 2);
  w.add_tensor("t.a", GgmlType::F32, {8}, pattern(1));
  w.add_tensor("t.b", GgmlType::F32, {8}, pattern(2));
  const Bytes good = w.to_bytes();
  Bytes b = good;
  b[find_bytes(b, "dup.b") + 4] = 'a';
  EXPECT_REJECTED(b, "t.gguf: duplicate metadata key 'dup.a' (entries #0 and #1)");
  b = good;
  b[find_bytes(b, "t.b") + 2] = 'a';
  EXPECT_REJECTED(b, "t.gguf: duplicate tensor name 't.a' (tensors #0 and #1)");
}

TEST(GgufReject, BadAlignment) {
  GgufWriter w;
  w.set_alignment(32);
  w.add_tensor("x", GgmlType::F32, {4}, pattern(1));
  const Bytes good = w.to_bytes();
  const size_t at = type_at(good, "general.alignment");
  Bytes b = good;
  poke<uint32_t>(b, at + 4, 48);
  EXPECT_REJECTED(b, "t.gguf: metadata 'general.alignment': 48 is not a nonzero power of two");
  poke<uint32_t>(b, at + 4, 0);
  EXPECT_REJECTED(b, "t.gguf: metadata 'general.alignment': 0 is not a nonzero power of two");
  poke<uint32_t>(b, at, uint32_t(GgufValueType::INT32));
  poke<int32_t>(b, at + 4, -64);
  EXPECT_REJECTED(b, "t.gguf: metadata 'general.alignment': -64 is not a nonzero power of two");
  b = good;
  poke<uint32_t>(b, at, uint32_t(GgufValueType::FLOAT32));
  EXPECT_REJECTED(b, "t.gguf: metadata 'general.alignment' has type float32, expected uint32");
  b = good;
  poke<uint32_t>(b, at + 4, 16);  // a smaller power of two is valid
  EXPECT_EQ(parse_error(b), "");
}

// ---- fuzz seeds: small valid files, committed under fuzz/corpus/gguf ----

}  // namespace
}  // namespace moe
