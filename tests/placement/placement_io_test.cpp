// Trace and placement files: round trips and the errors bad input gets.
#include <gtest/gtest.h>

#include "core/error.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "core/npy.h"
#include "placement/placement.h"
#include "placement/trace.h"
#include "placement/trace_gen.h"

namespace moe::placement {
namespace {

std::string tmp(const std::string& name) {
  const char* t = std::getenv("MOENGINE_TEST_TMP");
  const std::filesystem::path dir = std::filesystem::path(t ? t : "/tmp") / "placement";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TraceIo, RoundTripAndShapeChecks) {
  TraceGenOptions o;
  o.steps = 5, o.layers = 3, o.experts = 16, o.top_k = 4, o.tokens = 50;
  const Trace t = generate_trace(o);
  for (int64_t s = 0; s < t.steps; ++s) {
    for (int64_t l = 0; l < t.layers; ++l) {
      double sum = 0;
      for (int64_t e = 0; e < t.experts; ++e) sum += t.at(s, l, e);
      EXPECT_EQ(sum, 200);  // tokens x top-k
    }
  }
  const std::string path = tmp("trace.npy");
  write_trace(path, t);
  const Trace back = read_trace(path);
  EXPECT_EQ(back.steps, 5);
  EXPECT_EQ(back.layers, 3);
  EXPECT_EQ(back.experts, 16);
  EXPECT_EQ(back.load, t.load);

  const std::vector<float> flat(12, 1.0f);
  write_npy_f32(tmp("flat.npy"), {3, 4}, flat.data());
  EXPECT_NE(message_of([&] { read_trace(tmp("flat.npy")); }).find("3-D array"), std::string::npos);
}

TEST(TraceIo, NegativeAndNonFiniteLoadsAreRejected) {
  std::vector<float> v(8, 1.0f);
  v[5] = -1.0f;
  write_npy_f32(tmp("neg.npy"), {2, 2, 2}, v.data());
  EXPECT_NE(message_of([&] { read_trace(tmp("neg.npy")); }).find("step 1, layer 0, expert 1 is -1"), std::string::npos);
  v[5] = std::nanf("");
  write_npy_f32(tmp("nan.npy"), {2, 2, 2}, v.data());
  EXPECT_NE(message_of([&] { read_trace(tmp("nan.npy")); }).find("finite"), std::string::npos);
  v[5] = INFINITY;
  write_npy_f32(tmp("inf.npy"), {2, 2, 2}, v.data());
  EXPECT_THROW(read_trace(tmp("inf.npy")), Error);
}

TEST(TraceIo, Windows) {
  EXPECT_EQ(parse_window("3:9", "--window").begin, 3);
  EXPECT_EQ(parse_window("3:9", "--window").end, 9);
  EXPECT_THROW(parse_window("3-9", "--window"), Error);
  EXPECT_THROW(parse_window("a:9", "--window"), Error);
  EXPECT_THROW(parse_window("3:9x", "--window"), Error);
  Trace t{10, 1, 1, std::vector<float>(10, 1.0f)};
  EXPECT_NO_THROW(check_window(t, {0, 10}, "--window"));
  EXPECT_THROW(check_window(t, {5, 5}, "--window"), Error);
  EXPECT_THROW(check_window(t, {-1, 3}, "--window"), Error);
  EXPECT_THROW(check_window(t, {0, 11}, "--window"), Error);
}

TEST(PlacementIo, JsonRoundTripAndValidation) {
  Placement p{2, 1, 2, {{{0, 1, 2, 0}, {0, 0, 1, 1}}, {{2, 1, 0}, {0, 1, 1}}}};
  EXPECT_EQ(validate(p, 3), "");
  write_placement(tmp("p.json"), p);
  const Placement back = read_placement(tmp("p.json"));
  EXPECT_EQ(to_json(back), to_json(p));

  Placement missing = p;
  missing.layers[1].slots = {2, 1, 1};
  EXPECT_EQ(validate(missing, 3), "layer 1 holds no replica of expert 0");
  Placement over = p;
  over.layers[1] = {{2, 1, 0, 1}, {1, 1, 1, 1}};  // device 1: 2 + 4 = 6 slots > 2 x 2
  EXPECT_NE(validate(over, 3).find("device 1 holds 6 slots, over its budget of 4"), std::string::npos);
  Placement bad_device = p;
  bad_device.layers[0].devices[0] = 7;
  EXPECT_NE(validate(bad_device, 3).find("device 7"), std::string::npos);
  Placement ragged = p;
  ragged.layers[0].devices.pop_back();
  EXPECT_NE(validate(ragged, 3).find("4 slots but 3 devices"), std::string::npos);

  std::ofstream(tmp("bad.json")) << "{\"nodes\": 1, \"layers\": []}";
  EXPECT_NE(message_of([&] { read_placement(tmp("bad.json")); }).find("devices_per_node"), std::string::npos);
  std::ofstream(tmp("broken.json")) << "{";
  EXPECT_NE(message_of([&] { read_placement(tmp("broken.json")); }).find("not valid JSON"), std::string::npos);
}

// A format 1.0 .npy with a hand-written header dict and raw data bytes.
std::string npy_bytes(const std::string& dict, const std::string& data) {
  std::string header = dict;
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += char(header.size() & 0xff);
  out += char(header.size() >> 8);
  return out + header + data;
}

TEST(TraceIo, MalformedNpyHeadersGetAClearError) {
  const std::string data(32, '\0');
  // 2^62 x 4 bytes wraps to 0 in 64 bits: the shape must not pass for an empty payload.
  EXPECT_NE(message_of([] { parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 1, 1), }", ""), "x.npy"); })
                .find("x.npy: npy shape"),
            std::string::npos);
  EXPECT_NE(message_of([&] { parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, abc, 2), }", data), "x.npy"); })
                .find("x.npy: npy shape has a bad dimension 'abc'"),
            std::string::npos);
  EXPECT_NE(message_of([&] { parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999, ), }", data), "x.npy"); })
                .find("bad dimension"),
            std::string::npos);
  EXPECT_NE(message_of([&] { parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 2), }", data.substr(0, 31)), "x.npy"); })
                .find("31 bytes, the shape needs 32"),
            std::string::npos);
  EXPECT_NE(message_of([] { parse_npy(std::string("\x93NUMPY\x01\x00\x40", 9), "x.npy"); }).find("truncated"), std::string::npos);
  const NpyArray ok = parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 2), }", data), "x.npy");
  EXPECT_EQ(ok.shape, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(ok.data, std::vector<float>(8, 0.0f));
}

TEST(PlacementIo, IntegersOutOfRangeAreRejectedNotTruncated) {
  // 4294967300 would read as 4 once cut to 32 bits.
  EXPECT_NE(message_of([] { parse_placement(R"({"nodes": 4294967300, "devices_per_node": 1, "layers": []})", "p.json"); })
                .find("p.json: \"nodes\" must be an integer in 0..16777216"),
            std::string::npos);
  EXPECT_NE(message_of([] { parse_placement(R"({"nodes": 1, "devices_per_node": 1, "layers": [{"slots": [0, -1], "devices": [0, 0]}]})", "p.json"); })
                .find("p.json: layers[0].slots must hold integers in 0..16777216"),
            std::string::npos);
  // Each count fits, their product (2^36 devices) does not.
  const Placement huge = parse_placement(R"({"nodes": 262144, "devices_per_node": 262144, "layers": [{"slots": [0], "devices": [0]}]})", "p.json");
  EXPECT_NE(validate(huge, 1).find("262144 x 262144 devices, more than 1048576"), std::string::npos);
}

TEST(PlacementIo, TopologyChecks) {
  EXPECT_NO_THROW(check_topology({4, 8, 9}, 58, 256));
  EXPECT_NE(message_of([] { check_topology({4, 8, 7}, 58, 256); }).find("cannot hold each of the 256 experts once"), std::string::npos);
  EXPECT_THROW(check_topology({4, 0, 9}, 58, 256), Error);
  EXPECT_THROW(check_topology({4, 8, 9}, 0, 256), Error);
}

TEST(TraceGen, BadOptionsAreRejected) {
  TraceGenOptions o;
  o.top_k = 300;
  EXPECT_THROW(generate_trace(o), Error);
  o = {};
  o.drift = 2;
  EXPECT_THROW(generate_trace(o), Error);
  o = {};
  o.correlation = 0.5, o.groups = 7;
  EXPECT_THROW(generate_trace(o), Error);
  // Too large to allocate, and (the second) too large for 64 bits: an error, not an abort.
  o = {};
  o.steps = 100000, o.layers = 100000, o.experts = 100000, o.top_k = 1;
  EXPECT_NE(message_of([&] { generate_trace(o); }).find("100000 steps x 100000 layers x 100000 experts is more than 2147483648 loads"),
            std::string::npos);
  o.steps = 3000000000, o.layers = 3000000000, o.experts = 3000000000;
  EXPECT_NE(message_of([&] { generate_trace(o); }).find("is more than 2147483648 loads"), std::string::npos);
}

}  // namespace
}  // namespace moe::placement
