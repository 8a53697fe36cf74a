#pragma once
// Helpers shared by the GGUF tests: building files with the writer and corrupting them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "model/gguf.h"
#include "support/bytes_test_util.h"

namespace moe::gguf_testing {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

using testing::error_of;
using testing::pattern;

inline std::string parse_error(const Bytes& b) {
  return error_of([&] { GgufFile f("t.gguf", b.data(), b.size()); });
}

#define EXPECT_REJECTED(bytes, substring) EXPECT_ERROR_NAMING(parse_error(bytes), "t.gguf", substring)

inline size_t find_bytes(const Bytes& b, std::string_view needle) {
  const auto it = std::search(b.begin(), b.end(), needle.begin(), needle.end());
  EXPECT_NE(it, b.end()) << "no '" << needle << "' in the file";
  return size_t(it - b.begin());
}

template <typename T>
void poke(Bytes& b, size_t at, T v) {
  ASSERT_LE(at + sizeof(T), b.size());
  std::memcpy(b.data() + at, &v, sizeof(T));
}

// Offset of a metadata entry's type field (the value follows it).
inline size_t type_at(const Bytes& b, std::string_view key) { return find_bytes(b, key) + key.size(); }
// Offset of a tensor info's n_dims field; ne, type and offset follow it.
inline size_t n_dims_at(const Bytes& b, std::string_view name) {
  return find_bytes(b, name) + name.size();
}

inline GgufValue int_value(GgufValueType t, int64_t v) { return {t, v}; }

inline GgufArray int_array(GgufValueType t, std::vector<int64_t> v) {
  GgufArray a;
  a.elem_type = t;
  a.ints = std::move(v);
  return a;
}

// Two f32 tensors, "t.a" [8, 2] then "t.b" [16], and a little metadata.
inline Bytes two_tensors() {
  GgufWriter w;
  w.set_string("general.name", "two");
  w.add_tensor("t.a", GgmlType::F32, {8, 2}, pattern(1));
  w.add_tensor("t.b", GgmlType::F32, {16}, pattern(2));
  return w.to_bytes();
}

inline GgufWriter every_scalar() {
  GgufWriter w;
  w.set_value("u8", int_value(GgufValueType::UINT8, 255));
  w.set_value("i8", int_value(GgufValueType::INT8, -128));
  w.set_value("u16", int_value(GgufValueType::UINT16, 65535));
  w.set_value("i16", int_value(GgufValueType::INT16, -32768));
  w.set_u32("u32", std::numeric_limits<uint32_t>::max());
  w.set_i32("i32", std::numeric_limits<int32_t>::min());
  w.set_u64("u64", std::numeric_limits<uint64_t>::max());
  w.set_value("i64", int_value(GgufValueType::INT64, std::numeric_limits<int64_t>::min()));
  w.set_f32("f32", 1.5f);
  w.set_value("f64", {GgufValueType::FLOAT64, M_PI});
  w.set_bool("yes", true);
  w.set_bool("no", false);
  w.set_string("str", std::string("a\0b\xff\xfe", 5));  // bytes, not necessarily UTF-8
  w.set_string("empty", "");
  return w;
}

}  // namespace moe::gguf_testing
