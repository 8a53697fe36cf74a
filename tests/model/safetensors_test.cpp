// Safetensors: writer -> reader round trips, one case per rejection (a hand-written header
// with one thing wrong), and checkpoint directories (single file, sharded with an index).
#include "model/safetensors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "support/bytes_test_util.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

constexpr StDtype kAllDtypes[] = {StDtype::F64,     StDtype::F32,     StDtype::F16, StDtype::BF16,
                                  StDtype::F8_E4M3, StDtype::F8_E5M2, StDtype::I64, StDtype::I32,
                                  StDtype::I16,     StDtype::I8,      StDtype::U8,  StDtype::BOOL,
                                  StDtype::U16,     StDtype::U32,     StDtype::U64};

using testing::error_of;
using testing::pattern;

Bytes pattern_bytes(uint8_t seed, size_t n) {
  Bytes b(n);
  pattern(seed)(b.data(), n);
  return b;
}

// A file with this exact header text and `data_bytes` zero bytes of data.
Bytes raw(const std::string& header, size_t data_bytes = 0) {
  Bytes b(8 + header.size() + data_bytes, 0);
  const uint64_t len = header.size();
  std::memcpy(b.data(), &len, 8);
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

std::string parse_error(const Bytes& b) {
  return error_of([&] { SafetensorsFile f("t.safetensors", b.data(), b.size()); });
}

#define EXPECT_REJECTED(bytes, substring) EXPECT_ERROR_NAMING(parse_error(bytes), "t.safetensors", substring)

// {"a": {...}} with one F32 [2] tensor at [0, 8], the field `field` replaced by `value`.
std::string one_tensor(const std::string& field = "", const std::string& value = "") {
  std::string dtype = "\"F32\"", shape = "[2]", offsets = "[0,8]";
  if (field == "dtype") dtype = value;
  if (field == "shape") shape = value;
  if (field == "data_offsets") offsets = value;
  return "{\"a\":{\"dtype\":" + dtype + ",\"shape\":" + shape + ",\"data_offsets\":" + offsets +
         "}}";
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("safetensors_test_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

Bytes read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

TEST(StDtype, NamesAndSizes) {
  const std::pair<std::string_view, size_t> expected[] = {
      {"F64", 8},     {"F32", 4},  {"F16", 2}, {"BF16", 2}, {"F8_E4M3", 1},
      {"F8_E5M2", 1}, {"I64", 8},  {"I32", 4}, {"I16", 2},  {"I8", 1},
      {"U8", 1},      {"BOOL", 1}, {"U16", 2}, {"U32", 4},  {"U64", 8}};
  for (size_t i = 0; i < std::size(kAllDtypes); ++i) {
    EXPECT_EQ(st_dtype_name(kAllDtypes[i]), expected[i].first);
    EXPECT_EQ(st_dtype_size(kAllDtypes[i]), expected[i].second);
    EXPECT_EQ(st_dtype_from_name(expected[i].first), kAllDtypes[i]);
  }
  EXPECT_EQ(st_dtype_from_name("bf16"), std::nullopt);
  EXPECT_EQ(st_dtype_from_name("F4"), std::nullopt);
}

TEST(Safetensors, RoundTripsEveryDtypeAndShape) {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  w.set_metadata("note", "h\xc3\xa4\xc3\x9f \"quoted\"\n");
  std::vector<std::tuple<std::string, StDtype, std::vector<int64_t>>> added;
  uint8_t seed = 1;
  for (const StDtype t : kAllDtypes) {
    added.emplace_back("w." + std::string(st_dtype_name(t)), t, std::vector<int64_t>{3, 2});
  }
  added.emplace_back("scalar", StDtype::F32, std::vector<int64_t>{});
  added.emplace_back("empty.rows", StDtype::BF16, std::vector<int64_t>{0, 4});
  added.emplace_back("empty.cols", StDtype::F8_E4M3, std::vector<int64_t>{3, 0});
  added.emplace_back("rank4", StDtype::F16, std::vector<int64_t>{2, 1, 3, 5});
  for (const auto& [name, dtype, shape] : added) w.add(name, dtype, shape, pattern(seed++));

  const Bytes b = w.to_bytes();
  const SafetensorsFile f("t.safetensors", b.data(), b.size());
  EXPECT_EQ(f.data_offset() % 8, 0u);
  EXPECT_EQ(f.file_size(), b.size());
  ASSERT_EQ(f.tensors().size(), added.size());
  size_t expected_offset = 0;
  seed = 1;
  for (size_t i = 0; i < added.size(); ++i) {
    const StTensor& t = f.tensors()[i];
    const auto& [name, dtype, shape] = added[i];
    EXPECT_EQ(t.name, name);
    EXPECT_EQ(t.dtype, dtype);
    EXPECT_EQ(t.shape, shape);
    EXPECT_EQ(t.n_bytes, size_t(t.n_elements()) * st_dtype_size(dtype)) << name;
    EXPECT_EQ(t.offset, expected_offset) << name;  // packed in the order added
    EXPECT_EQ(t.data, b.data() + f.data_offset() + t.offset);
    EXPECT_EQ(Bytes(t.data, t.data + t.n_bytes), pattern_bytes(seed++, t.n_bytes)) << name;
    EXPECT_EQ(f.find(name), &t);
    expected_offset += t.n_bytes;
  }
  EXPECT_EQ(f.data_offset() + expected_offset, b.size());
  EXPECT_EQ(f.find("scalar")->n_elements(), 1);
  EXPECT_EQ(f.find("scalar")->n_bytes, 4u);
  EXPECT_EQ(f.find("empty.rows")->n_bytes, 0u);
  EXPECT_EQ(f.find("empty.cols")->n_elements(), 0);
  EXPECT_EQ(f.find("w.F8_E4M3")->n_bytes, 6u);
  EXPECT_EQ(f.find("absent"), nullptr);
  const std::vector<std::pair<std::string, std::string>> meta{
      {"format", "pt"}, {"note", "h\xc3\xa4\xc3\x9f \"quoted\"\n"}};
  EXPECT_EQ(f.metadata(), meta);
}

TEST(Safetensors, WritesFileThroughTmp) {
  const fs::path dir = scratch("write");
  const std::string path = (dir / "model.safetensors").string();
  SafetensorsWriter w;
  std::vector<std::string> filled;
  for (const char* name : {"x.0", "x.1", "x.2"}) {
    w.add(name, StDtype::BF16, {4, 3}, [&filled, name](uint8_t* dst, size_t n) {
      filled.push_back(name);
      pattern(uint8_t(name[2]))(dst, n);
    });
  }
  w.write(path);
  EXPECT_EQ(filled, (std::vector<std::string>{"x.0", "x.1", "x.2"}));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(read_file(path), w.to_bytes());
  SafetensorsFile f(path);
  EXPECT_EQ(f.path(), path);
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(Bytes(f.tensors()[1].data, f.tensors()[1].data + 24), pattern_bytes('1', 24));
  f.prefetch();
  SafetensorsFile moved = std::move(f);
  EXPECT_EQ(moved.find("x.2"), &moved.tensors()[2]);
  fs::remove_all(dir);
}

TEST(Safetensors, FailedFillLeavesNoFile) {
  const fs::path dir = scratch("fail");
  const std::string path = (dir / "model.safetensors").string();
  SafetensorsWriter w;
  w.add("x", StDtype::F32, {4}, [](uint8_t*, size_t) { throw Error("fill failed"); });
  EXPECT_THROW(w.write(path), Error);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  fs::remove_all(dir);
}

TEST(Safetensors, WriterRefusesWhatTheFormatCannotHold) {
  SafetensorsWriter w;
  w.add("a", StDtype::F32, {2});
  EXPECT_CONTAINS(error_of([&] { w.add("a", StDtype::F16, {1}); }), "duplicate tensor name 'a'");
  EXPECT_CONTAINS(error_of([&] { w.add("__metadata__", StDtype::F16, {1}); }),
                  "'__metadata__' cannot name a tensor");
  EXPECT_CONTAINS(error_of([&] {
                    w.add("neg", StDtype::F16, {2, -1});
                  }),
                  "tensor 'neg': negative dimension in [2, -1]");
  EXPECT_CONTAINS(error_of([&] {
                    w.add("big", StDtype::U8, {int64_t(1) << 32, int64_t(1) << 32});
                  }),
                  "tensor 'big': element count of [4294967296, 4294967296] overflows int64");
  EXPECT_CONTAINS(error_of([&] { w.add("wide", StDtype::F64, {int64_t(1) << 61}); }),
                  "tensor 'wide': byte size overflows");
  EXPECT_CONTAINS(error_of([&] { w.add("bad\xff", StDtype::F16, {1}); }), "is not valid UTF-8");
  EXPECT_CONTAINS(error_of([&] { w.set_metadata("k", "\xc3"); }), "is not valid UTF-8");
  w.set_metadata("k", "1");
  w.set_metadata("k", "2");
  const Bytes b = w.to_bytes();
  const SafetensorsFile f("t.safetensors", b.data(), b.size());
  EXPECT_EQ(f.metadata(), (std::vector<std::pair<std::string, std::string>>{{"k", "2"}}));
  EXPECT_EQ(f.tensors().size(), 1u);  // the refused adds left nothing behind
}

TEST(Safetensors, ReaderOrdersByOffsetAndAllowsGaps) {
  // Header order b, e, a; 4 unused bytes between a and b; e (empty) inside a's range.
  const Bytes bytes =
      raw(" {\"b\":{\"dtype\":\"U8\",\"shape\":[2,2],\"data_offsets\":[8,12]},"
          "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[2,2]},"
          "\"__metadata__\":{},"
          "\"a\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[0,4]}}  ",
          16);
  const SafetensorsFile f("t.safetensors", bytes.data(), bytes.size());
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.tensors()[0].name, "a");
  EXPECT_EQ(f.tensors()[1].name, "e");
  EXPECT_EQ(f.tensors()[2].name, "b");
  EXPECT_EQ(f.find("b")->data, bytes.data() + f.data_offset() + 8);
  EXPECT_TRUE(f.metadata().empty());

  const Bytes empty = raw("{}");
  const SafetensorsFile g("t.safetensors", empty.data(), empty.size());
  EXPECT_TRUE(g.tensors().empty());
  g.prefetch();
}

TEST(SafetensorsReject, HeaderLength) {
  EXPECT_REJECTED(Bytes({1, 2, 3}), "file is 3 bytes, shorter than the 8-byte header length");
  EXPECT_REJECTED(raw("", 16), "header length is 0");
  Bytes b = raw(one_tensor(), 8);
  const uint64_t past = b.size() - 7;
  std::memcpy(b.data(), &past, 8);
  EXPECT_REJECTED(b, "header length " + std::to_string(past) +
                         " is larger than the file after its first 8 bytes (" +
                         std::to_string(b.size() - 8) + ")");
  const uint64_t huge = uint64_t(100) << 20 | 1;
  std::memcpy(b.data(), &huge, 8);
  EXPECT_REJECTED(b, "header length 104857601 is over the 100 MiB limit");
}

TEST(SafetensorsReject, NotJsonOrNotAnObject) {
  EXPECT_REJECTED(raw("{\"a\" 1}"), "t.safetensors: header is not valid JSON: parse error");
  EXPECT_REJECTED(raw("{} x"), "header is not valid JSON");
  EXPECT_REJECTED(raw("{\"a\xff\":{}}"), "header is not valid JSON");  // not UTF-8
  EXPECT_REJECTED(raw("{/*c*/}"), "header is not valid JSON");
  EXPECT_REJECTED(raw("[1]"), "header must be a JSON object, found an array");
  EXPECT_REJECTED(raw("5"), "header must be a JSON object, found 5");
  EXPECT_REJECTED(raw("{\"a\":5}"), "tensor 'a': entry must be a JSON object, found 5");
  EXPECT_REJECTED(raw("{\"a\":[{}]}"), "tensor 'a': entry must be a JSON object, found an array");
}

TEST(SafetensorsReject, Dtype) {
  EXPECT_REJECTED(raw(one_tensor("dtype", "\"F4\""), 8),
                  "tensor 'a': unknown dtype 'F4' (supported: F64, F32, F16, BF16, F8_E4M3");
  EXPECT_REJECTED(raw(one_tensor("dtype", "4"), 8), "tensor 'a': dtype must be a string, found 4");
}

TEST(SafetensorsReject, Shape) {
  const std::string what = "tensor 'a': shape must be an array of non-negative integers, found ";
  EXPECT_REJECTED(raw(one_tensor("shape", "2"), 8), what + "2");
  EXPECT_REJECTED(raw(one_tensor("shape", "{}"), 8), what + "an object");
  EXPECT_REJECTED(raw(one_tensor("shape", "[2,-1]"), 8),
                  "tensor 'a': shape[1] must be a non-negative integer, found -1");
  EXPECT_REJECTED(raw(one_tensor("shape", "[2.0]"), 8),
                  "shape[0] must be a non-negative integer, found 2.0");
  EXPECT_REJECTED(raw(one_tensor("shape", "[[2]]"), 8),
                  "shape[0] must be a non-negative integer, found an array");
  EXPECT_REJECTED(raw(one_tensor("shape", "[1e30]"), 8), "found 1e30");
  EXPECT_REJECTED(raw(one_tensor("shape", "[9223372036854775808]"), 8),
                  "shape[0] is 9223372036854775808, larger than 2^63-1");
  EXPECT_REJECTED(raw(one_tensor("shape", "[4294967296,4294967296]"), 8),
                  "tensor 'a': element count of shape [4294967296, 4294967296] overflows int64");
  EXPECT_REJECTED(raw(one_tensor("shape", "[4611686018427387904]"), 8),
                  "tensor 'a': byte size of shape [4611686018427387904] in F32 overflows");
}

TEST(SafetensorsReject, DataOffsets) {
  const std::string two = "tensor 'a': data_offsets must be two integers [begin, end], found ";
  EXPECT_REJECTED(raw(one_tensor("data_offsets", "[8]"), 8), two + "1");
  EXPECT_REJECTED(raw(one_tensor("data_offsets", "[]"), 8), two + "0");
  EXPECT_REJECTED(raw(one_tensor("data_offsets", "[0,8,8]"), 8), two + "more than two");
  EXPECT_REJECTED(raw(one_tensor("data_offsets", "\"0,8\""), 8), two + "a string");
  EXPECT_REJECTED(raw(one_tensor("data_offsets", "[0,-8]"), 8),
                  "tensor 'a': data_offsets[1] must be a non-negative integer, found -8");
  EXPECT_REJECTED(raw(one_tensor("data_offsets", "[0,8.5]"), 8),
                  "data_offsets[1] must be a non-negative integer, found 8.5");
  EXPECT_REJECTED(raw(one_tensor("data_offsets", "[null,8]"), 8),
                  "data_offsets[0] must be a non-negative integer, found null");
  EXPECT_REJECTED(raw(one_tensor("data_offsets", "[8,0]"), 8),
                  "tensor 'a': data_offsets [8, 0]: begin is after end");
  EXPECT_REJECTED(raw(one_tensor("data_offsets", "[0,4]"), 8),
                  "tensor 'a': data_offsets [0, 4] hold 4 bytes, but shape [2] of F32 needs 8");
  EXPECT_REJECTED(
      raw(one_tensor("data_offsets", "[4,12]"), 8),
      "tensor 'a': data_offsets [4, 12] run past the end of the data section (8 bytes)");
  EXPECT_REJECTED(raw(one_tensor("data_offsets", "[18446744073709551608,18446744073709551615]"), 8),
                  "hold 7 bytes, but shape [2] of F32 needs 8");
}

TEST(SafetensorsReject, Overlap) {
  const std::string header =
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[7,11]}}";
  EXPECT_REJECTED(raw(header, 12),
                  "tensor 'b' (data_offsets [7, 11]) overlaps tensor 'a' (data_offsets [0, 8])");
}

TEST(SafetensorsReject, DuplicatesAndFields) {
  const std::string a = "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}";
  const std::string a2 = "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}";
  EXPECT_REJECTED(raw("{" + a + "," + a2 + "}", 8), "duplicate tensor name 'a'");
  EXPECT_REJECTED(
      raw("{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4),
      "tensor 'a': duplicate field 'dtype'");
  EXPECT_REJECTED(raw("{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,4]}}", 4),
                  "tensor 'a': missing field 'shape'");
  EXPECT_REJECTED(raw("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4],\"x\":1}}", 4),
                  "tensor 'a': unknown field 'x' (expected dtype, shape and data_offsets)");
}

TEST(SafetensorsReject, Metadata) {
  EXPECT_REJECTED(raw("{\"__metadata__\":5}"),
                  "__metadata__ must be an object of strings, found 5");
  EXPECT_REJECTED(raw("{\"__metadata__\":null}"),
                  "__metadata__ must be an object of strings, found null");
  EXPECT_REJECTED(raw("{\"__metadata__\":[\"a\"]}"),
                  "__metadata__ must be an object of strings, found an array");
  EXPECT_REJECTED(raw("{\"__metadata__\":{\"k\":1}}"),
                  "__metadata__ 'k': value must be a string (__metadata__ must be an object of "
                  "strings), found 1");
  EXPECT_REJECTED(raw("{\"__metadata__\":{\"k\":{}}}"), "__metadata__ 'k': value must be a string");
  EXPECT_REJECTED(raw("{\"__metadata__\":{\"k\":\"1\",\"j\":\"\",\"k\":\"2\"}}"),
                  "__metadata__: duplicate key 'k'");
  EXPECT_REJECTED(raw("{\"__metadata__\":{},\"__metadata__\":{}}"), "duplicate key '__metadata__'");
}

TEST(SafetensorsReject, TruncatedAnywhere) {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  w.add("a", StDtype::BF16, {2, 3}, pattern(1));
  w.add("b", StDtype::F8_E5M2, {5}, pattern(2));
  const Bytes full = w.to_bytes();
  for (size_t n = 0; n < full.size(); ++n) {
    const std::string msg = parse_error(Bytes(full.begin(), full.begin() + long(n)));
    ASSERT_EQ(msg.rfind("t.safetensors: ", 0), 0u)
        << "prefix of " << n << " bytes: '" << msg << "'";
  }
  EXPECT_EQ(parse_error(full), "");
}

// Six 64-byte tensors in shards of at most 150 bytes: two per shard.
SafetensorsWriter six_tensors() {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  for (int i = 0; i < 6; ++i) {
    w.add("layers." + std::to_string(5 - i) + ".w", StDtype::F32, {4, 4}, pattern(uint8_t(i)));
  }
  return w;
}

TEST(SafetensorsSet, OpensShardsThroughTheIndex) {
  const fs::path dir = scratch("sharded");
  six_tensors().write_sharded(dir.string(), 150);
  for (const char* f : {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                        "model-00003-of-00003.safetensors", "model.safetensors.index.json"}) {
    EXPECT_TRUE(fs::exists(dir / f)) << f;
  }
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
  const auto index = nlohmann::json::parse(read_file(dir / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], 384);
  EXPECT_EQ(index["weight_map"]["layers.5.w"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["layers.0.w"], "model-00003-of-00003.safetensors");

  const SafetensorsSet set = SafetensorsSet::open(dir.string());
  EXPECT_EQ(set.files().size(), 3u);
  EXPECT_EQ(set.names(), (std::vector<std::string>{"layers.0.w", "layers.1.w", "layers.2.w",
                                                   "layers.3.w", "layers.4.w", "layers.5.w"}));
  EXPECT_EQ(set.total_bytes(), 384u);
  for (int i = 0; i < 6; ++i) {
    const std::string name = "layers." + std::to_string(5 - i) + ".w";
    const StTensor* t = set.find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(Bytes(t->data, t->data + t->n_bytes), pattern_bytes(uint8_t(i), 64));
    EXPECT_EQ(set.file_of(name),
              (dir / fmt::format("model-0000{}-of-00003.safetensors", i / 2 + 1)).string());
    EXPECT_EQ(set.files()[size_t(i / 2)]->metadata().at(0).second, "pt");
  }
  EXPECT_EQ(set.find("layers.6.w"), nullptr);
  EXPECT_CONTAINS(error_of([&] { set.file_of("layers.6.w"); }), "no tensor 'layers.6.w'");
  fs::remove_all(dir);
}

TEST(SafetensorsSet, ShardSizes) {
  const fs::path dir = scratch("sizes");
  SafetensorsWriter w;
  w.add("a", StDtype::U8, {64});
  w.add("big", StDtype::U8, {200});  // over the limit: a shard of its own
  w.add("c", StDtype::U8, {64});
  w.write_sharded(dir.string(), 100);
  const SafetensorsSet set = SafetensorsSet::open(dir.string());
  ASSERT_EQ(set.files().size(), 3u);
  EXPECT_EQ(set.files()[1]->tensors().at(0).name, "big");

  // One shard is enough: model.safetensors alone; the old index and shards go, other files stay.
  write_file(dir / "config.json", "{}");
  write_file(dir / "model-extra-of-mine.safetensors", "");
  w.write_sharded(dir.string(), 1000);
  std::vector<std::string> files;
  for (const auto& f : fs::directory_iterator(dir)) files.push_back(f.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"config.json", "model-extra-of-mine.safetensors",
                                             "model.safetensors"}));
  fs::remove(dir / "model-extra-of-mine.safetensors");
  const SafetensorsSet one = SafetensorsSet::open(dir.string());
  EXPECT_EQ(one.files().size(), 1u);
  EXPECT_EQ(one.file_of("big"), (dir / "model.safetensors").string());
  EXPECT_CONTAINS(error_of([&] { w.write_sharded(dir.string(), 0); }), "must be positive");
  w.write_sharded(dir.string(), 100);
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
  EXPECT_EQ(SafetensorsSet::open(dir.string()).files().size(), 3u);
  fs::remove_all(dir);
}

TEST(SafetensorsSet, MissingShard) {
  const fs::path dir = scratch("missing");
  six_tensors().write_sharded(dir.string(), 150);
  fs::remove(dir / "model-00002-of-00003.safetensors");
  const std::string msg = error_of([&] { SafetensorsSet::open(dir.string()); });
  EXPECT_CONTAINS(msg, "model.safetensors.index.json: shard file " +
                           (dir / "model-00002-of-00003.safetensors").string() + " is missing");
  EXPECT_TRUE(msg.find("tensor 'layers.3.w'") != msg.npos ||
              msg.find("tensor 'layers.2.w'") != msg.npos)
      << msg;
  fs::remove_all(dir);
}

TEST(SafetensorsSet, IndexDisagreesWithShards) {
  const fs::path dir = scratch("disagree");
  six_tensors().write_sharded(dir.string(), 150);
  const fs::path index_path = dir / "model.safetensors.index.json";
  const auto good = nlohmann::json::parse(read_file(index_path));

  auto index = good;
  index["weight_map"]["ghost"] = "model-00001-of-00003.safetensors";
  write_file(index_path, index.dump());
  EXPECT_CONTAINS(error_of([&] { SafetensorsSet::open(dir.string()); }),
                  "tensor 'ghost' is listed in shard " +
                      (dir / "model-00001-of-00003.safetensors").string() +
                      ", which does not contain it");
  index = good;
  index["weight_map"]["layers.5.w"] = "model-00002-of-00003.safetensors";
  write_file(index_path, index.dump());
  EXPECT_CONTAINS(error_of([&] { SafetensorsSet::open(dir.string()); }),
                  "which does not contain it (it is in " +
                      (dir / "model-00001-of-00003.safetensors").string() + ")");
  index = good;
  index["weight_map"]["layers.5.w"] = "../model.safetensors";
  write_file(index_path, index.dump());
  EXPECT_CONTAINS(error_of([&] { SafetensorsSet::open(dir.string()); }),
                  "weight_map 'layers.5.w': shard '../model.safetensors' is not a file name");
  write_file(index_path, "{\"weight_map\": [1]}");
  EXPECT_CONTAINS(error_of([&] { SafetensorsSet::open(dir.string()); }),
                  "with a \"weight_map\" object");
  write_file(index_path, "{\"weight_map\": {\"a\": 1}}");
  EXPECT_CONTAINS(error_of([&] { SafetensorsSet::open(dir.string()); }),
                  "weight_map 'a' is not a shard file name");
  write_file(index_path, "{\"weight_map\": ");
  EXPECT_CONTAINS(error_of([&] { SafetensorsSet::open(dir.string()); }),
                  "model.safetensors.index.json: not valid JSON");
  fs::remove_all(dir);
}

TEST(SafetensorsSet, TensorInTwoShards) {
  const fs::path dir = scratch("twice");
  SafetensorsWriter a, b;
  a.add("shared", StDtype::F16, {2}, pattern(1));
  b.add("shared", StDtype::F16, {2}, pattern(2));
  b.add("other", StDtype::F16, {2}, pattern(3));
  a.write((dir / "s1.safetensors").string());
  b.write((dir / "s2.safetensors").string());
  write_file(
      dir / "model.safetensors.index.json",
      R"({"metadata": {}, "weight_map": {"shared": "s1.safetensors", "other": "s2.safetensors"}})");
  EXPECT_CONTAINS(error_of([&] { SafetensorsSet::open(dir.string()); }),
                  "tensor 'shared' is in two shards: " + (dir / "s1.safetensors").string() +
                      " and " + (dir / "s2.safetensors").string());
  fs::remove_all(dir);
}

TEST(SafetensorsSet, SingleFileDirectory) {
  const fs::path dir = scratch("single");
  EXPECT_CONTAINS(error_of([&] { SafetensorsSet::open(dir.string()); }),
                  "no model.safetensors.index.json and no *.safetensors file");
  EXPECT_CONTAINS(error_of([&] { SafetensorsSet::open((dir / "nope").string()); }),
                  "not a directory");
  SafetensorsWriter w;
  w.add("x", StDtype::I32, {3}, pattern(1));
  w.write((dir / "weights.safetensors").string());
  write_file(dir / "config.json", "{}");
  const SafetensorsSet set = SafetensorsSet::open(dir.string());
  EXPECT_EQ(set.names(), std::vector<std::string>{"x"});
  EXPECT_EQ(set.file_of("x"), (dir / "weights.safetensors").string());
  EXPECT_EQ(set.total_bytes(), 12u);
  w.write((dir / "more.safetensors").string());
  EXPECT_CONTAINS(error_of([&] { SafetensorsSet::open(dir.string()); }),
                  "several .safetensors files (more.safetensors, weights.safetensors) and no "
                  "model.safetensors.index.json");
  fs::remove_all(dir);
}

std::vector<std::pair<std::string, Bytes>> seed_files() {
  std::vector<std::pair<std::string, Bytes>> seeds;
  seeds.emplace_back("empty.safetensors", SafetensorsWriter().to_bytes());
  SafetensorsWriter every;
  uint8_t seed = 1;
  for (const StDtype t : kAllDtypes)
    every.add(std::string(st_dtype_name(t)), t, {2}, pattern(seed++));
  seeds.emplace_back("every_dtype.safetensors", every.to_bytes());
  SafetensorsWriter model;
  model.set_metadata("format", "pt");
  model.add("model.embed_tokens.weight", StDtype::BF16, {8, 4}, pattern(1));
  model.add("model.layers.0.mlp.experts.0.down_proj.weight", StDtype::F8_E4M3, {4, 8}, pattern(2));
  model.add("model.layers.0.mlp.experts.0.down_proj.weight_scale_inv", StDtype::F32, {1, 1},
            pattern(3));
  model.add("model.norm.weight", StDtype::F32, {8}, pattern(4));
  seeds.emplace_back("model.safetensors", model.to_bytes());
  SafetensorsWriter edge;
  edge.set_metadata("", "");
  edge.add("scalar", StDtype::F64, {}, pattern(5));
  edge.add("empty", StDtype::U16, {0, 3});
  edge.add("rank4", StDtype::BOOL, {1, 2, 1, 3}, pattern(6));
  seeds.emplace_back("edge.safetensors", edge.to_bytes());
  return seeds;
}

// The fuzz seeds are committed files; a change to the writer's output shows up here.
// Regenerate them with MOENGINE_WRITE_ST_SEEDS=<repo>/fuzz/corpus/safetensors.
TEST(SafetensorsCorpus, SeedsAreCurrent) {
  if (const char* dir = std::getenv("MOENGINE_WRITE_ST_SEEDS")) {
    fs::create_directories(dir);
    for (const auto& [name, bytes] : seed_files()) {
      std::ofstream(fs::path(dir) / name, std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    }
  }
#ifdef MOE_SOURCE_DIR
  for (const auto& [name, bytes] : seed_files()) {
    const fs::path path = fs::path(MOE_SOURCE_DIR) / "fuzz/corpus/safetensors" / name;
    ASSERT_TRUE(fs::exists(path)) << path;
    EXPECT_EQ(read_file(path), bytes) << path << " is stale";
    EXPECT_NO_THROW(SafetensorsFile{path.string()});
  }
#endif
}

}  // namespace
}  // namespace moe
