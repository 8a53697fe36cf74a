// sim calibrate's pieces: bench model results read (and refused with the file and field
// named), a fit that recovers the figures measurements were generated from and predicts
// runs it did not see, the KV link fitted from kv-transfer rows, and the profile it writes
// read back by the simulator's own reader.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <yaml-cpp/yaml.h>

#include "core/error.h"
#include "sim/calibration.h"
#include "sim_files.h"

namespace moe::sim {
namespace {

// The shape of the generated mid deepseek2 model, in q8_0.
ModelShape mid_shape() {
  ModelShape m;
  m.name = "mid";
  m.vocab = 32000;
  m.hidden = 1024;
  m.layers = 8;
  m.dense_layers = 1;
  m.dense_ff = 2816;
  m.attention = {AttentionKind::mla, 16, 0, 0, 384, 256, 64, 32, 64};
  m.experts = 32;
  m.experts_per_token = 4;
  m.shared_experts = 1;
  m.expert_ff = 512;
  return m;
}

Precision q8() {
  Precision p;
  p.weights = "q8_0";
  p.activations = "q8_0";
  p.kv_cache = "f32";
  return p;
}

CpuInfo cpu() {
  CpuInfo c;
  c.model = "test CPU";
  c.mhz = 3000;
  c.mem_gib = 24;
  c.avx512 = c.avx2 = c.vnni = true;
  return c;
}

// The figures measurements are made from: what the fit should find again.
Hardware truth(const std::string& gemm_type) {
  Hardware h;
  h.name = "truth";
  h.mem_bw = 30e9;
  h.flops = {{"int8", 2 * 3000e6 * 256}, {"f32", 2 * 3000e6 * 64}};
  h.efficiency.gemm = gemm_type == "int8" ? 0.35 : 0.6;
  h.efficiency.memory = 0.8;
  h.efficiency.attention_compute = 0.25;
  h.efficiency.attention_memory = 0.5;
  h.layer_overhead_s = 15e-6;
  h.step_overhead_s = 300e-6;
  h.scale_up = h.scale_out = default_kv_link();
  return h;
}

std::vector<BenchMeasurement> plan(const std::vector<int64_t>& batches, int64_t context) {
  std::vector<BenchMeasurement> ms;
  for (int64_t pp : {64, 128, 512}) ms.push_back({BenchMeasurement::Kind::prefill, pp, 1, 0, 0, 0, "pp" + std::to_string(pp)});
  ms.push_back({BenchMeasurement::Kind::decode, 64, 1, 0, 0, 0, "tg64"});
  for (int64_t b : batches) ms.push_back({BenchMeasurement::Kind::batched_decode, 32, b, context, 0, 0, "batch"});
  return ms;
}

BenchModelRun run_of(const Hardware& hw, const ModelShape& m, const Precision& p, std::vector<BenchMeasurement> ms) {
  BenchModelRun r;
  r.file = "synthetic.json";
  r.threads = 2;
  r.memory_bandwidth = hw.mem_bw;
  for (BenchMeasurement& x : ms) x.step_s = predict_step_seconds(hw, m, p, x);
  r.measurements = std::move(ms);
  return r;
}

TEST(SimCalibration, ReadsABenchModelResult) {
  const nlohmann::json j = {{"model", "m.gguf"},
                            {"threads", 2},
                            {"reps", 3},
                            {"pp", 128},
                            {"tg", 64},
                            {"pp_tokens_per_s", 320.0},
                            {"tg_tokens_per_s", 40.0},
                            {"tg_stddev", 2.0},
                            {"memory_bandwidth_gbps", 25.0},
                            {"batched_decode", {{{"batch", 4}, {"context", 512}, {"tokens_per_s", 100.0}}}}};
  const BenchModelRun r = parse_bench_model("a.json", j);
  ASSERT_EQ(r.measurements.size(), 3u);
  EXPECT_EQ(r.measurements[0].label, "pp128");
  EXPECT_DOUBLE_EQ(r.measurements[0].step_s, 0.4);
  EXPECT_EQ(r.measurements[1].label, "tg64");
  EXPECT_DOUBLE_EQ(r.measurements[1].step_s, 0.025);
  EXPECT_DOUBLE_EQ(r.measurements[1].stddev_s, 0.025 * 0.05);
  EXPECT_EQ(r.measurements[2].label, "batch 4 @ 512");
  EXPECT_EQ(r.measurements[2].kind, BenchMeasurement::Kind::batched_decode);
  EXPECT_DOUBLE_EQ(r.measurements[2].step_s, 0.04);
  EXPECT_DOUBLE_EQ(r.memory_bandwidth, 25e9);
  EXPECT_EQ(r.command, "moengine bench model --model m.gguf --pp 128 --tg 64 --reps 3 --threads 2 --batch 4 --batch-context 512 --json");
}

TEST(SimCalibration, RefusesWhatIsNotABenchModelResult) {
  try {
    parse_bench_model("kv.json", nlohmann::json::parse(R"({"threads": 2, "reps": 1, "pp": 8, "tg": 8})"));
    FAIL() << "no error";
  } catch (const moe::Error& e) {
    EXPECT_STREQ(e.what(), "kv.json: not a `moengine bench model --json` result: no number `memory_bandwidth_gbps`");
  }
  EXPECT_THROW(parse_bench_model("x.json", nlohmann::json::array()), moe::Error);
  const nlohmann::json zero = {{"threads", 2}, {"reps", 1}, {"pp", 8}, {"tg", 8}, {"pp_tokens_per_s", 0.0},
                               {"tg_tokens_per_s", 1.0}, {"memory_bandwidth_gbps", 1.0}};
  EXPECT_THROW(parse_bench_model("z.json", zero), moe::Error);
}

TEST(SimCalibration, RefusesRunsOfDifferentThreadCounts) {
  const Hardware hw = truth("int8");
  CalibrationInput in;
  in.model = mid_shape();
  in.precision = q8();
  in.cpu = cpu();
  in.runs = {run_of(hw, in.model, in.precision, plan({4}, 128)), run_of(hw, in.model, in.precision, plan({4}, 128))};
  in.runs[1].threads = 1;
  EXPECT_THROW(calibrate(in), moe::Error);
}

void expect_recovers(const ModelShape& model, const Precision& precision, const std::string& gemm_type) {
  const Hardware hw = truth(gemm_type);
  CalibrationInput in;
  in.model = model;
  in.precision = precision;
  in.cpu = cpu();
  in.runs = {run_of(hw, model, precision, plan({1, 4, 16}, 128)), run_of(hw, model, precision, plan({2, 8, 32}, 1024))};
  const Calibration c = calibrate(in);
  EXPECT_LT(c.rms_log_error, 0.01);
  const Hardware& f = c.hardware;
  EXPECT_NEAR(f.flops.at(gemm_type) * f.efficiency.gemm / (hw.flops.at(gemm_type) * hw.efficiency.gemm), 1, 0.05);
  EXPECT_NEAR(f.efficiency.memory / hw.efficiency.memory, 1, 0.05);
  EXPECT_NEAR(f.layer_overhead_s * double(model.layers) + f.step_overhead_s,
              hw.layer_overhead_s * double(model.layers) + hw.step_overhead_s, 50e-6);
  // Runs the fit never saw: another batch size and a deeper context.
  for (const BenchMeasurement& m : plan({12, 48}, 2048)) {
    const double want = predict_step_seconds(hw, model, precision, m), got = predict_step_seconds(f, model, precision, m);
    EXPECT_NEAR(got / want, 1, 0.03) << m.label << " " << m.batch;
  }
}

TEST(SimCalibration, RecoversTheFiguresOfAQuantizedModel) { expect_recovers(mid_shape(), q8(), "int8"); }

TEST(SimCalibration, FitsF32ModelsAtTheF32Rate) {
  Precision p;
  p.weights = p.activations = p.kv_cache = "f32";
  expect_recovers(mid_shape(), p, "f32");
}

TEST(SimCalibration, FitsTheKvLinkFromTransferRows) {
  // 40 us + bytes / 3 GB/s, with a second method that must be ignored.
  nlohmann::json rows = nlohmann::json::array();
  for (double bytes : {65536.0, 1048576.0, 16777216.0}) {
    rows.push_back({{"method", "tcp blocks"}, {"bytes", bytes}, {"seconds_per_transfer", 40e-6 + bytes / 3e9}});
    rows.push_back({{"method", "ucx blocks"}, {"bytes", bytes}, {"seconds_per_transfer", bytes / 9e9}});
  }
  const LinkFit f = fit_kv_transfer("kv.json", rows, "tcp");
  EXPECT_EQ(f.method, "tcp blocks");
  EXPECT_NEAR(f.link.bw / 3e9, 1, 1e-6);
  EXPECT_NEAR(f.link.latency_s, 40e-6, 1e-9);
  try {
    fit_kv_transfer("kv.json", rows, "rdma");
    FAIL() << "no error";
  } catch (const moe::Error& e) {
    EXPECT_STREQ(e.what(), "kv.json: fewer than two rows of method 'rdma' (or 'rdma blocks')");
  }
}

TEST(SimCalibration, WritesAProfileTheSimulatorReads) {
  const Hardware hw = truth("int8");
  CalibrationInput in;
  in.name = "cpu-test";
  in.model = mid_shape();
  in.precision = q8();
  in.cpu = cpu();
  in.runs = {run_of(hw, in.model, in.precision, plan({1, 4, 16}, 128))};
  const Calibration c = calibrate(in);
  const std::string path = testing::write_config("cpu-test.yaml", hardware_yaml(c, "fit table\nsecond line"));
  const Hardware back = read_hardware(path, YAML::LoadFile(path), "");
  EXPECT_EQ(back.name, "cpu-test");
  EXPECT_NEAR(back.mem_bw / c.hardware.mem_bw, 1, 1e-3);
  EXPECT_NEAR(back.efficiency.memory / c.hardware.efficiency.memory, 1, 1e-3);
  EXPECT_NEAR(back.layer_overhead_s / c.hardware.layer_overhead_s, 1, 1e-3);
  EXPECT_EQ(back.sources.at("efficiency.gemm"), c.hardware.sources.at("efficiency.gemm"));
  for (const BenchMeasurement& m : in.runs[0].measurements)
    EXPECT_NEAR(predict_step_seconds(back, in.model, in.precision, m) / m.step_s, 1, 0.02) << m.label;
}

}  // namespace
}  // namespace moe::sim
