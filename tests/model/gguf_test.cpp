#include "model/gguf.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "gguf_test_util.h"

namespace moe {
namespace {

using namespace gguf_testing;

TEST(GgufRoundTrip, EveryScalarType) {
  const Bytes b = every_scalar().to_bytes();
  GgufFile f("t.gguf", b.data(), b.size());
  EXPECT_EQ(f.version(), 3u);
  ASSERT_EQ(f.metadata().size(), 14u);
  EXPECT_EQ(f.metadata()[0].first, "u8");  // file order kept
  EXPECT_EQ(f.find("u8")->type, GgufValueType::UINT8);
  EXPECT_EQ(f.get_int("u8"), 255);
  EXPECT_EQ(f.get_int("i8"), -128);
  EXPECT_EQ(f.get_int("u16"), 65535);
  EXPECT_EQ(f.get_int("i16"), -32768);
  EXPECT_EQ(f.get_int("u32"), 4294967295);
  EXPECT_EQ(f.find("i32")->type, GgufValueType::INT32);
  EXPECT_EQ(f.get_int("i32"), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(f.find("u64")->type, GgufValueType::UINT64);
  EXPECT_EQ(std::get<uint64_t>(f.find("u64")->value), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(f.get_int("i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(f.find("f32")->type, GgufValueType::FLOAT32);
  EXPECT_EQ(f.get_float("f32"), 1.5);
  EXPECT_EQ(f.get_float("f64"), M_PI);
  EXPECT_EQ(f.get_bool("yes"), true);
  EXPECT_EQ(f.get_bool("no"), false);
  EXPECT_EQ(f.get_string("str"), std::string("a\0b\xff\xfe", 5));
  EXPECT_EQ(f.get_string("empty"), "");
  EXPECT_TRUE(f.tensors().empty());
}

TEST(GgufRoundTrip, ArraysOfEveryElementType) {
  GgufWriter w;
  w.set_value("a.u8", {GgufValueType::ARRAY, int_array(GgufValueType::UINT8, {0, 255})});
  w.set_value("a.i8", {GgufValueType::ARRAY, int_array(GgufValueType::INT8, {-128, 127})});
  w.set_value("a.u16", {GgufValueType::ARRAY, int_array(GgufValueType::UINT16, {65535})});
  w.set_value("a.i16", {GgufValueType::ARRAY, int_array(GgufValueType::INT16, {-32768, 1})});
  w.set_value("a.u32", {GgufValueType::ARRAY, int_array(GgufValueType::UINT32, {4294967295})});
  w.set_array_i32("a.i32", {-1, 0, 1, std::numeric_limits<int32_t>::min()});
  w.set_value("a.u64", {GgufValueType::ARRAY, int_array(GgufValueType::UINT64, {0, INT64_MAX})});
  w.set_value("a.i64", {GgufValueType::ARRAY, int_array(GgufValueType::INT64, {INT64_MIN, 5})});
  w.set_value("a.bool", {GgufValueType::ARRAY, int_array(GgufValueType::BOOL, {1, 0, 1})});
  w.set_array_f32("a.f32", {0.25f, -2.0f});
  GgufArray f64;
  f64.elem_type = GgufValueType::FLOAT64;
  f64.floats = {1e300, -0.0};
  w.set_value("a.f64", {GgufValueType::ARRAY, f64});
  w.set_array_string("a.str", {"hello", "", std::string("\0x", 2)});
  w.set_array_i32("a.empty", {});
  const Bytes b = w.to_bytes();
  GgufFile f("t.gguf", b.data(), b.size());

  auto ints = [&](const char* key) { return f.require_array(key).ints; };
  EXPECT_EQ(ints("a.u8"), (std::vector<int64_t>{0, 255}));
  EXPECT_EQ(ints("a.i8"), (std::vector<int64_t>{-128, 127}));
  EXPECT_EQ(ints("a.u16"), (std::vector<int64_t>{65535}));
  EXPECT_EQ(ints("a.i16"), (std::vector<int64_t>{-32768, 1}));
  EXPECT_EQ(ints("a.u32"), (std::vector<int64_t>{4294967295}));
  EXPECT_EQ(ints("a.i32"), (std::vector<int64_t>{-1, 0, 1, std::numeric_limits<int32_t>::min()}));
  EXPECT_EQ(ints("a.u64"), (std::vector<int64_t>{0, INT64_MAX}));
  EXPECT_EQ(ints("a.i64"), (std::vector<int64_t>{INT64_MIN, 5}));
  EXPECT_EQ(ints("a.bool"), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(f.get_array("a.u64")->elem_type, GgufValueType::UINT64);
  EXPECT_EQ(f.get_array("a.f32")->floats, (std::vector<double>{0.25, -2.0}));
  EXPECT_EQ(f.get_array("a.f32")->elem_type, GgufValueType::FLOAT32);
  EXPECT_EQ(f.get_array("a.f64")->floats[0], 1e300);
  EXPECT_TRUE(std::signbit(f.get_array("a.f64")->floats[1]));
  EXPECT_EQ(f.get_array("a.str")->strings,
            (std::vector<std::string>{"hello", "", std::string("\0x", 2)}));
  EXPECT_EQ(f.get_array("a.str")->size(), 3u);
  EXPECT_EQ(f.get_array("a.empty")->size(), 0u);
  EXPECT_EQ(f.get_array("a.missing"), nullptr);
}

TEST(GgufRoundTrip, TensorsOfSeveralTypes) {
  struct Spec {
    const char* name;
    GgmlType type;
    std::vector<int64_t> ne;
    size_t n_bytes;
  };
  const std::vector<Spec> specs = {
      {"f32", GgmlType::F32, {7}, 28},
      {"f16", GgmlType::F16, {3, 5}, 30},
      {"bf16", GgmlType::BF16, {2, 2, 2}, 16},
      {"q8_0", GgmlType::Q8_0, {64, 3}, 6 * 34},
      {"q4_0", GgmlType::Q4_0, {32, 2, 1, 2}, 4 * 18},
      {"q4_K", GgmlType::Q4_K, {256, 2}, 2 * 144},
      {"q6_K", GgmlType::Q6_K, {512}, 2 * 210},
      {"q2_K", GgmlType::Q2_K, {256}, 84},  // known but not computable: still read
  };
  GgufWriter w;
  for (size_t i = 0; i < specs.size(); ++i) {
    w.add_tensor(specs[i].name, specs[i].type, specs[i].ne, pattern(uint8_t(i)));
  }
  const Bytes b = w.to_bytes();
  GgufFile f("t.gguf", b.data(), b.size());
  ASSERT_EQ(f.tensors().size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const GgufTensorInfo& t = f.tensors()[i];
    EXPECT_EQ(t.name, specs[i].name);
    EXPECT_EQ(t.type, specs[i].type);
    EXPECT_EQ(t.ne, specs[i].ne);
    EXPECT_EQ(t.n_bytes, specs[i].n_bytes) << t.name;
    EXPECT_EQ(f.find_tensor(specs[i].name), &t);
    Bytes expected(t.n_bytes);
    pattern(uint8_t(i))(expected.data(), expected.size());
    EXPECT_EQ(std::memcmp(f.tensor_data(t), expected.data(), t.n_bytes), 0) << t.name;
  }
  EXPECT_EQ(f.tensors()[4].n_elements(), 128);
  EXPECT_FALSE(traits(GgmlType::Q2_K).supported);
  EXPECT_EQ(f.find_tensor("missing"), nullptr);
}

TEST(GgufWriter, WritesFileThroughTmpWithProgress) {
  const fs::path dir = fs::path(::testing::TempDir()) / "gguf_test_write";
  fs::create_directories(dir);
  const std::string path = (dir / "model.gguf").string();
  GgufWriter w = every_scalar();
  std::vector<std::string> filled;
  for (const char* name : {"x.0", "x.1", "x.2"}) {
    w.add_tensor(name, GgmlType::F16, {48, 2}, [&filled, name](uint8_t* dst, size_t n) {
      filled.push_back(name);
      pattern(uint8_t(name[2]))(dst, n);
    });
  }
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  w.write(path, [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); });
  EXPECT_EQ(filled, (std::vector<std::string>{"x.0", "x.1", "x.2"}));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  ASSERT_EQ(calls.size(), 4u);  // after the header, then after each tensor
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_GT(calls[i].first, calls[i - 1].first);
  EXPECT_EQ(calls.back().first, calls.back().second);
  EXPECT_EQ(calls.back().second, fs::file_size(path));

  GgufFile f(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.file_size(), fs::file_size(path));
  EXPECT_EQ(f.get_int("u16"), 65535);
  f.prefetch();
  std::ifstream in(path, std::ios::binary);
  const Bytes on_disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(on_disk, w.to_bytes());
  fs::remove_all(dir);
}

TEST(GgufWriter, FailedFillLeavesNoFile) {
  const fs::path dir = fs::path(::testing::TempDir()) / "gguf_test_fail";
  fs::create_directories(dir);
  const std::string path = (dir / "model.gguf").string();
  GgufWriter w;
  w.add_tensor("x", GgmlType::F32, {4}, [](uint8_t*, size_t) { throw Error("fill failed"); });
  EXPECT_THROW(w.write(path), Error);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  fs::remove_all(dir);
}

TEST(GgufWriter, SameCallsSameBytes) {
  auto build = [] {
    GgufWriter w = every_scalar();
    w.set_array_string("tok", {"a", "b"});
    w.add_tensor("w", GgmlType::Q8_0, {32, 3}, pattern(9));
    w.add_tensor("v", GgmlType::F32, {5});  // no fill: zeros
    return w.to_bytes();
  };
  const Bytes a = build();
  EXPECT_EQ(a, build());
  GgufFile f("t.gguf", a.data(), a.size());
  const auto* v = f.find_tensor("v");
  ASSERT_NE(v, nullptr);
  for (size_t i = 0; i < v->n_bytes; ++i) EXPECT_EQ(f.tensor_data(*v)[i], 0);
}

TEST(GgufWriter, SettingAKeyAgainReplacesItInPlace) {
  GgufWriter w;
  w.set_u32("a", 1);
  w.set_u32("b", 2);
  w.set_string("a", "x");
  const Bytes b = w.to_bytes();
  GgufFile f("t.gguf", b.data(), b.size());
  ASSERT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.metadata()[0].first, "a");
  EXPECT_EQ(f.get_string("a"), "x");
}

TEST(GgufWriter, AlignmentHonoured) {
  for (const uint32_t alignment : {0u, 1u, 64u, 4096u}) {
    GgufWriter w;
    if (alignment) w.set_alignment(alignment);
    w.add_tensor("a", GgmlType::F32, {3}, pattern(1));
    w.add_tensor("b", GgmlType::Q4_0, {32}, pattern(2));
    w.add_tensor("c", GgmlType::F16, {5}, pattern(3));
    const Bytes b = w.to_bytes();
    GgufFile f("t.gguf", b.data(), b.size());
    const size_t a = alignment ? alignment : 32;
    EXPECT_EQ(f.alignment(), a);
    if (alignment) {
      EXPECT_EQ(f.find("general.alignment")->type, GgufValueType::UINT32);
      EXPECT_EQ(f.get_int("general.alignment"), alignment);
    } else {
      EXPECT_FALSE(f.has("general.alignment"));
    }
    EXPECT_EQ(f.data_offset() % a, 0u);
    EXPECT_EQ(b.size() % a, 0u);
    size_t end = 0;
    for (const auto& t : f.tensors()) {
      EXPECT_EQ(t.offset % a, 0u) << t.name << " alignment " << a;
      for (size_t i = f.data_offset() + end; i < f.data_offset() + t.offset; ++i)
        EXPECT_EQ(b[i], 0);
      end = t.offset + t.n_bytes;
    }
    EXPECT_EQ(f.tensors()[1].offset, a == 1 ? 12u : a);
  }
}

TEST(GgufWriter, RejectsBadCalls) {
  GgufWriter w;
  EXPECT_CONTAINS(error_of([&] { w.set_alignment(0); }), "not a nonzero power of two");
  EXPECT_CONTAINS(error_of([&] { w.set_alignment(48); }), "alignment 48");
  EXPECT_CONTAINS(error_of([&] {
                    w.set_value("general.alignment", {GgufValueType::STRING, std::string("x")});
                  }),
                  "power of two");
  EXPECT_CONTAINS(error_of([&] { w.set_value("k", int_value(GgufValueType::UINT8, 300)); }),
                  "metadata 'k': value 300 does not fit in uint8");
  EXPECT_CONTAINS(error_of([&] {
                    w.set_value("k", {GgufValueType::STRING, int64_t(1)});
                  }),
                  "std::string");
  GgufArray nested;
  nested.elem_type = GgufValueType::ARRAY;
  EXPECT_CONTAINS(error_of([&] {
                    w.set_value("k", {GgufValueType::ARRAY, nested});
                  }),
                  "nested arrays");
  GgufArray mixed = int_array(GgufValueType::FLOAT32, {1});
  EXPECT_CONTAINS(error_of([&] {
                    w.set_value("k", {GgufValueType::ARRAY, mixed});
                  }),
                  "another kind");
  EXPECT_CONTAINS(error_of([&] { w.add_tensor("t", GgmlType::Q8_0, {33}, {}); }),
                  "tensor 't': ne[0] = 33 is not a multiple of the q8_0 block size 32");
  EXPECT_CONTAINS(error_of([&] { w.add_tensor("t", GgmlType::F32, {}, {}); }), "0 dimensions");
  EXPECT_CONTAINS(error_of([&] {
                    w.add_tensor("t", GgmlType::F32, {1, 1, 1, 1, 1}, {});
                  }),
                  "5 dimensions");
  EXPECT_CONTAINS(error_of([&] { w.add_tensor("t", GgmlType::F32, {4, 0}, {}); }), "not positive");
  w.add_tensor("t", GgmlType::F32, {4}, {});
  w.add_tensor("t", GgmlType::F32, {4}, {});
  EXPECT_CONTAINS(error_of([&] { w.to_bytes(); }), "duplicate tensor name 't'");
}

TEST(GgufGetters, ConvertWhenTheValueFits) {
  GgufWriter w = every_scalar();
  w.set_u64("small64", 7);
  const Bytes b = w.to_bytes();
  GgufFile f("t.gguf", b.data(), b.size());
  EXPECT_EQ(f.get_int("small64"), 7);
  EXPECT_EQ(f.get_float("u8"), 255.0);  // floats accept integers
  EXPECT_EQ(f.get_float("u64"), 18446744073709551615.0);
  EXPECT_EQ(f.require_int("i16"), -32768);
  EXPECT_EQ(f.require_float("f32"), 1.5);
  EXPECT_EQ(f.require_string("empty"), "");
  EXPECT_TRUE(f.require_bool("yes"));
  EXPECT_EQ(f.get_int("absent"), std::nullopt);
  EXPECT_EQ(f.get_float("absent"), std::nullopt);
  EXPECT_EQ(f.get_bool("absent"), std::nullopt);
  EXPECT_EQ(f.get_string("absent"), std::nullopt);
  EXPECT_FALSE(f.has("absent"));
  EXPECT_TRUE(f.has("u8"));
}

TEST(GgufGetters, MismatchNamesFileKeyAndBothTypes) {
  GgufWriter w = every_scalar();
  w.set_array_i32("arr", {1});
  const Bytes b = w.to_bytes();
  GgufFile f("t.gguf", b.data(), b.size());
  EXPECT_EQ(error_of([&] { (void)f.get_int("f32"); }),
            "t.gguf: metadata 'f32' has type float32, which does not convert to int64");
  EXPECT_EQ(error_of([&] { (void)f.get_int("u64"); }),
            "t.gguf: metadata 'u64' is 18446744073709551615 (uint64), which does not fit in int64");
  EXPECT_EQ(error_of([&] { (void)f.get_string("u32"); }),
            "t.gguf: metadata 'u32' has type uint32, which does not convert to string");
  EXPECT_EQ(error_of([&] { (void)f.get_bool("str"); }),
            "t.gguf: metadata 'str' has type string, which does not convert to bool");
  EXPECT_EQ(error_of([&] { (void)f.get_float("arr"); }),
            "t.gguf: metadata 'arr' has type array of int32, which does not convert to float64");
  EXPECT_EQ(error_of([&] { (void)f.get_array("i8"); }),
            "t.gguf: metadata 'i8' has type int8, which does not convert to array");
  EXPECT_EQ(error_of([&] { (void)f.require_int("nope"); }),
            "t.gguf: required metadata key 'nope' is missing");
  EXPECT_EQ(error_of([&] { (void)f.require_array("nope"); }),
            "t.gguf: required metadata key 'nope' is missing");
}

TEST(GgufReader, AcceptsVersion2) {
  Bytes b = two_tensors();
  poke<uint32_t>(b, 4, 2);
  GgufFile f("t.gguf", b.data(), b.size());
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.tensors().size(), 2u);
}

TEST(GgufReader, MissingFile) {
  try {
    GgufFile f("/nonexistent/dir/model.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/model.gguf: cannot open"),
              std::string::npos);
  }
}

// ---- rejections: a valid file from the writer, then one field corrupted ----

std::vector<std::pair<std::string, Bytes>> seed_files() {
  std::vector<std::pair<std::string, Bytes>> seeds;
  seeds.emplace_back("empty.gguf", GgufWriter().to_bytes());
  GgufWriter meta = every_scalar();
  meta.set_array_string("tokenizer.ggml.tokens", {"<s>", "</s>", "a", "\xe2\x96\x81the"});
  meta.set_array_f32("tokenizer.ggml.scores", {0, 0, -1.5f, -2});
  meta.set_array_i32("tokenizer.ggml.token_type", {3, 3, 1, 1});
  meta.set_value("bools", {GgufValueType::ARRAY, int_array(GgufValueType::BOOL, {1, 0})});
  meta.set_value("u64s", {GgufValueType::ARRAY, int_array(GgufValueType::UINT64, {1, 1 << 20})});
  seeds.emplace_back("metadata.gguf", meta.to_bytes());
  GgufWriter tensors;
  tensors.set_string("general.architecture", "deepseek2");
  tensors.set_u32("deepseek2.block_count", 1);
  tensors.add_tensor("token_embd.weight", GgmlType::F16, {8, 4}, pattern(1));
  tensors.add_tensor("blk.0.attn_q.weight", GgmlType::Q8_0, {32, 2}, pattern(2));
  tensors.add_tensor("blk.0.ffn_down_exps.weight", GgmlType::Q4_K, {256, 1, 2}, pattern(3));
  tensors.add_tensor("output_norm.weight", GgmlType::F32, {8}, pattern(4));
  tensors.add_tensor("blk.0.ffn_gate_inp.weight", GgmlType::BF16, {8, 2}, pattern(5));
  seeds.emplace_back("tensors.gguf", tensors.to_bytes());
  GgufWriter v2;
  v2.set_alignment(64);
  v2.set_string("general.name", "v2");
  v2.add_tensor("a", GgmlType::Q4_0, {32, 2}, pattern(6));
  v2.add_tensor("b", GgmlType::Q6_K, {256}, pattern(7));
  Bytes b = v2.to_bytes();
  b[4] = 2;
  seeds.emplace_back("v2_align64.gguf", std::move(b));
  return seeds;
}

// The committed seeds are exactly what the writer makes today, so a change to the writer's
// bytes shows up here. Regenerate them with MOENGINE_WRITE_GGUF_SEEDS=<repo>/fuzz/corpus/gguf.
TEST(GgufCorpus, SeedsAreCurrent) {
  if (const char* dir = std::getenv("MOENGINE_WRITE_GGUF_SEEDS")) {
    fs::create_directories(dir);
    for (const auto& [name, bytes] : seed_files()) {
      std::ofstream(fs::path(dir) / name, std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    }
  }
#ifdef MOE_SOURCE_DIR
  for (const auto& [name, bytes] : seed_files()) {
    const fs::path path = fs::path(MOE_SOURCE_DIR) / "fuzz/corpus/gguf" / name;
    ASSERT_TRUE(fs::exists(path)) << path;
    std::ifstream in(path, std::ios::binary);
    EXPECT_EQ(Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), bytes)
        << path << " is stale";
    EXPECT_NO_THROW(GgufFile{path.string()});
  }
#endif
}

}  // namespace
}  // namespace moe

