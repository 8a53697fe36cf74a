#pragma once
// A hardware profile for the machine moengine runs on, fitted to `moengine bench model`
// measurements of a model file on it (and `bench kv-transfer` for the KV link).
//
// Each measurement is a step time the cost model can predict from the model's shape and
// precision: a pp run is one prefill of N tokens from an empty cache (one sequence), a tg
// run N decode steps of one sequence at contexts 0 .. N-1 (their mean), a --batch run B
// sequences stepping together at contexts C + i, i = 0 .. tg-1 (the mean step). The fit
// chooses the effective GEMM throughput at the model's compute type (int8 for quantized
// weights, f32 for f32 ones: flops x efficiency.gemm), the effective f32
// attention throughput (flops x efficiency.attention_compute), efficiency.memory and
// efficiency.attention_memory (of mem_bw, the 1 GiB buffer read bandwidth bench model
// measured), overhead.layer_us and overhead.step_us, minimising the squared log error of
// CostModel's predictions (the simulator's own step times) against the measurements, by
// Nelder-Mead in log space within bounds. The peaks are nominal figures (cores x clock x
// the widest vector unit's operations per cycle, from /proc/cpuinfo): only their product
// with the efficiencies is measured.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/profiles.h"

namespace moe::sim {

struct BenchMeasurement {
  enum class Kind { prefill, decode, batched_decode } kind = Kind::prefill;
  int64_t tokens = 0;   // prefill: prompt tokens; decode and batched: steps
  int64_t batch = 1;    // batched: sequences per step
  int64_t context = 0;  // batched: each sequence's context before the first step
  double step_s = 0;    // measured seconds (prefill: the one step; else the mean step)
  double stddev_s = 0;  // over the repetitions
  std::string label;    // "pp512", "tg64", "batch 16 @ 128"
};

// One `bench model --json` output.
struct BenchModelRun {
  std::string file;
  std::string model;  // the model path the run loaded
  int32_t threads = 0;
  int32_t reps = 0;
  std::string cpu_features, matmul_backend, attention_backend;
  std::string kv_cache = "f32";       // the KV dtype the runs held their cache in (simulator's name)
  double memory_bandwidth = 0;        // bytes/s, the 1 GiB buffer, mean beside the tg runs
  double step_weights_bandwidth = 0;  // bytes/s, the weights decode steps read (0: not measured)
  std::vector<BenchMeasurement> measurements;
  std::string command;  // the bench model command line that gives these fields
};

// Throws moe::Error naming `file` for a document that is not a bench model --json output.
BenchModelRun parse_bench_model(const std::string& file, const nlohmann::json& j);

// A link from `bench kv-transfer --json` rows of one method: latency + bytes / bw fitted by
// least squares (relative error) over the sizes measured.
struct LinkFit {
  Link link;
  std::string method, source;
};
LinkFit fit_kv_transfer(const std::string& file, const nlohmann::json& rows, const std::string& method);

// How long an idle engine takes from a request's submission to its first step: the mean of
// request_queue_time_seconds in a `moengine serve` /metrics page (Prometheus text) taken
// after requests sent one at a time. Throws moe::Error naming `file` when the page has no
// such histogram or it counted no request.
struct WakeFit {
  double wake_s = 0;
  std::string source;
};
WakeFit fit_wake(const std::string& file, const std::string& metrics_text);

struct CpuInfo {
  std::string model;  // /proc/cpuinfo "model name"
  double mhz = 0;     // "cpu MHz"
  double mem_gib = 0; // /proc/meminfo MemTotal
  bool avx512 = false, avx2 = false, vnni = false;
};
CpuInfo read_cpu_info(const std::string& cpuinfo = "/proc/cpuinfo", const std::string& meminfo = "/proc/meminfo");

struct CalibrationInput {
  std::string name = "cpu-local";
  ModelShape model;
  Precision precision;
  std::vector<BenchModelRun> runs;  // all with the same thread count: one device
  std::optional<LinkFit> kv_link;   // none: the default below
  std::optional<WakeFit> wake;      // none: 0
  CpuInfo cpu;
  std::string date;  // of the calibration, for the sources
};

struct FitRow {
  std::string run, label;
  double measured_s = 0, predicted_s = 0;
  double error() const { return predicted_s / measured_s - 1; }
};

struct Calibration {
  Hardware hardware;
  std::vector<FitRow> rows;
  double rms_log_error = 0;
  int32_t evaluations = 0;
};

// The step time the cost model predicts for one measurement on `hw`.
double predict_step_seconds(const Hardware& hw, const ModelShape& model, const Precision& precision,
                            const BenchMeasurement& m);

Calibration calibrate(const CalibrationInput& in);

// The profile as a configs/sim/hardware/*.yaml file (read_hardware reads it back), with the
// fit's table as comments.
std::string hardware_yaml(const Calibration& c, const std::string& comment);

// The KV link used when no bench kv-transfer result is given: TCP loopback on a 2-vCPU
// Zen 5 VM (docs in calibration.cpp).
Link default_kv_link();

}  // namespace moe::sim
