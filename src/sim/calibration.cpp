#include "sim/calibration.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <functional>
#include <numeric>
#include <sstream>

#include "core/error.h"
#include "sim/cost_model.h"
#include "sim/sim_config.h"

namespace moe::sim {

namespace {

constexpr double kGB = 1e9;

double number_at(const std::string& file, const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) fail("{}: not a `moengine bench model --json` result: no number `{}`", file, key);
  return j[key].get<double>();
}

std::string text_at(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

}  // namespace

BenchModelRun parse_bench_model(const std::string& file, const nlohmann::json& j) {
  if (!j.is_object()) fail("{}: not a `moengine bench model --json` result (not a JSON object)", file);
  BenchModelRun r;
  r.file = file;
  r.model = text_at(j, "model");
  r.threads = int32_t(number_at(file, j, "threads"));
  r.reps = int32_t(number_at(file, j, "reps"));
  r.cpu_features = text_at(j, "cpu");
  r.matmul_backend = text_at(j, "matmul_backend");
  r.attention_backend = text_at(j, "attention_backend");
  // Runs from before the KV dtypes held their cache in f32; the simulator spells fp8_e4m3 fp8.
  r.kv_cache = j.contains("kv_cache_dtype") ? text_at(j, "kv_cache_dtype") : "f32";
  if (r.kv_cache == "fp8_e4m3") r.kv_cache = "fp8";
  r.memory_bandwidth = number_at(file, j, "memory_bandwidth_gbps") * kGB;
  if (j.contains("step_weights_bandwidth_gbps")) r.step_weights_bandwidth = number_at(file, j, "step_weights_bandwidth_gbps") * kGB;
  const int64_t pp = int64_t(number_at(file, j, "pp")), tg = int64_t(number_at(file, j, "tg"));
  const double pp_rate = number_at(file, j, "pp_tokens_per_s"), tg_rate = number_at(file, j, "tg_tokens_per_s");
  if (pp < 1 || tg < 1 || pp_rate <= 0 || tg_rate <= 0) fail("{}: pp, tg and their rates must be positive", file);
  auto rel_sd = [&](const char* key, double mean) { return j.contains(key) && j[key].is_number() ? j[key].get<double>() / mean : 0.0; };
  r.measurements.push_back({BenchMeasurement::Kind::prefill, pp, 1, 0, double(pp) / pp_rate,
                            double(pp) / pp_rate * rel_sd("pp_stddev", pp_rate), fmt::format("pp{}", pp)});
  r.measurements.push_back({BenchMeasurement::Kind::decode, tg, 1, 0, 1 / tg_rate, 1 / tg_rate * rel_sd("tg_stddev", tg_rate),
                            fmt::format("tg{}", tg)});
  std::vector<std::string> batches;
  int64_t batch_context = 0;
  if (j.contains("batched_decode")) {
    if (!j["batched_decode"].is_array()) fail("{}: batched_decode must be an array", file);
    for (const nlohmann::json& b : j["batched_decode"]) {
      const int64_t batch = int64_t(number_at(file, b, "batch")), context = int64_t(number_at(file, b, "context"));
      const double rate = number_at(file, b, "tokens_per_s");
      if (batch < 1 || context < 0 || rate <= 0) fail("{}: a batched_decode entry has a non-positive batch or rate", file);
      const double step = double(batch) / rate;
      r.measurements.push_back({BenchMeasurement::Kind::batched_decode, tg, batch, context, step,
                                step * (b.contains("stddev") && b["stddev"].is_number() ? b["stddev"].get<double>() / rate : 0.0),
                                fmt::format("batch {} @ {}", batch, context)});
      batches.push_back(std::to_string(batch));
      batch_context = context;
    }
  }
  r.command = fmt::format("moengine bench model --model {} --pp {} --tg {} --reps {} --threads {}{} --json", r.model, pp, tg,
                          r.reps, r.threads,
                          batches.empty() ? "" : fmt::format(" --batch {} --batch-context {}", fmt::join(batches, ","), batch_context));
  return r;
}

LinkFit fit_kv_transfer(const std::string& file, const nlohmann::json& rows, const std::string& method) {
  if (!rows.is_array()) fail("{}: not a `moengine bench kv-transfer --json` result (not an array)", file);
  // A hand-off reads blocks spread over the source's pool: the "blocks" rows where there are.
  std::string chosen = method + " blocks";
  auto count = [&](const std::string& m) {
    return std::count_if(rows.begin(), rows.end(), [&](const nlohmann::json& r) { return r.value("method", "") == m; });
  };
  if (count(chosen) < 2) chosen = method;
  if (count(chosen) < 2) fail("{}: fewer than two rows of method '{}' (or '{} blocks')", file, method, method);
  // Least squares of t = latency + bytes / bw, each row weighted by 1 / t^2 (relative error).
  double s00 = 0, s01 = 0, s11 = 0, r0 = 0, r1 = 0;
  std::vector<std::string> sizes;
  for (const nlohmann::json& r : rows) {
    if (r.value("method", "") != chosen) continue;
    const double bytes = r.at("bytes").get<double>(), t = r.at("seconds_per_transfer").get<double>();
    if (!(t > 0)) continue;
    const double w = 1 / (t * t);
    s00 += w, s01 += w * bytes, s11 += w * bytes * bytes, r0 += w * t, r1 += w * t * bytes;
    sizes.push_back(fmt::format("{:.0f} KiB", bytes / 1024));
  }
  const double det = s00 * s11 - s01 * s01;
  double latency = (r0 * s11 - r1 * s01) / det, per_byte = (s00 * r1 - s01 * r0) / det;
  if (!(per_byte > 0) || latency < 0) {
    // No sensible line: the largest transfer's rate, no latency.
    latency = 0;
    per_byte = 0;
    for (const nlohmann::json& r : rows)
      if (r.value("method", "") == chosen) per_byte = std::max(per_byte, r.at("seconds_per_transfer").get<double>() / r.at("bytes").get<double>());
  }
  LinkFit f;
  f.link = Link{1 / per_byte, latency};
  f.method = chosen;
  f.source = fmt::format("{}: `moengine bench kv-transfer` rows '{}' ({}), fitted as latency + bytes / bw (least squares, "
                         "relative error): {:.2f} GB/s, {:.1f} us",
                         file, chosen, fmt::join(sizes, ", "), f.link.bw / kGB, latency * 1e6);
  return f;
}

WakeFit fit_wake(const std::string& file, const std::string& metrics_text) {
  // Lines "NAME[{labels}] VALUE"; the serve page has one series per histogram.
  auto value = [&](const std::string& name) -> std::optional<double> {
    std::istringstream lines(metrics_text);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind(name, 0) != 0 || line.size() == name.size() || (line[name.size()] != ' ' && line[name.size()] != '{')) continue;
      const size_t sp = line.rfind(' ');
      try {
        return std::stod(line.substr(sp + 1));
      } catch (const std::exception&) {
        fail("{}: {} has no number: {}", file, name, line);
      }
    }
    return std::nullopt;
  };
  const std::string name = "moengine:request_queue_time_seconds";
  const std::optional<double> sum = value(name + "_sum"), n = value(name + "_count");
  if (!sum || !n) fail("{}: no {} histogram (a `moengine serve` /metrics page is needed)", file, name);
  if (*n < 1) fail("{}: {} counted no request", file, name);
  WakeFit w;
  w.wake_s = *sum / *n;
  w.source = fmt::format("mean {} of {} requests, one at a time, in {}", name, int64_t(*n), file);
  return w;
}

Link default_kv_link() {
  // `moengine bench kv-transfer --transports tcp` on the 2-vCPU AMD EPYC (Zen 5) VM this was
  // written on: 2.0-2.7 GB/s for 1-64 MiB reads over TCP loopback, ~65 us for 64 KiB.
  return Link{2.4e9, 60e-6};
}

CpuInfo read_cpu_info(const std::string& cpuinfo, const std::string& meminfo) {
  CpuInfo c;
  std::ifstream in(cpuinfo);
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && c.model.empty()) c.model = value;
    if (key == "cpu MHz" && c.mhz == 0) c.mhz = std::atof(value.c_str());
    if (key == "flags" && !c.avx2) {
      std::istringstream flags(value);
      for (std::string f; flags >> f;) {
        if (f == "avx512f") c.avx512 = true;
        if (f == "avx2") c.avx2 = true;
        if (f == "avx512_vnni" || f == "avx_vnni") c.vnni = true;
      }
    }
  }
  std::ifstream mem(meminfo);
  for (std::string key; mem >> key;) {
    double kb = 0;
    mem >> kb;
    if (key == "MemTotal:") {
      c.mem_gib = kb / (1024.0 * 1024.0);
      break;
    }
    std::string rest;
    std::getline(mem, rest);
  }
  if (c.model.empty()) c.model = "unknown CPU";
  return c;
}

namespace {

// Predicts measurements for one set of figures; built once, re-timed per candidate.
class Predictor {
 public:
  Predictor(const ModelShape& model, const Precision& precision, const Hardware& hw) {
    c_.file = "calibration";
    c_.model = model;
    c_.precision = precision;
    c_.hardware = hw;
    pool_.kv_cache_gib = 1;  // room for the measured contexts; capacity does not enter step times
    c_.deployment.unified = pool_;
  }
  Hardware& hardware() { return c_.hardware; }

  double step(const BenchMeasurement& m) const {
    const CostModel cost(c_, pool_, Phase::unified, std::vector<double>(size_t(c_.model.moe_layers()), 1.0));
    RankBatch b;
    if (m.kind == BenchMeasurement::Kind::prefill) {
      cost.add_sequence(b, m.tokens, 0, true);
      return cost.step_seconds({&b, 1});
    }
    // The mean over the run's steps; every step is timed for runs of up to 64 steps, else
    // 64 evenly spread (step time is smooth in the context).
    const int64_t samples = std::min<int64_t>(m.tokens, 64);
    double sum = 0;
    for (int64_t s = 0; s < samples; ++s) {
      const int64_t i = samples == m.tokens ? s : (s * (m.tokens - 1)) / std::max<int64_t>(samples - 1, 1);
      b = RankBatch{};
      const int64_t context = m.kind == BenchMeasurement::Kind::decode ? i : m.context + i;
      cost.add_decodes(b, m.batch, 1, double(m.batch) * double(context));
      sum += cost.step_seconds({&b, 1});
    }
    return sum / double(samples);
  }

 private:
  SimConfig c_;
  PoolConfig pool_;
};

// Nominal peak FLOP/s per core-cycle of the widest vector unit: two FMA pipes of its width
// (f32: 2 x lanes x 2; int8 dot products, VNNI: 2 x 4 x lanes x 2).
struct Peaks {
  double int8 = 0, f32 = 0;
  std::string how;
};

Peaks nominal_peaks(const CpuInfo& cpu, int32_t threads) {
  const double lanes = cpu.avx512 ? 16 : cpu.avx2 ? 8 : 4;
  const double f32 = 2 * lanes * 2;
  const double int8 = cpu.vnni ? 2 * 4 * lanes * 2 : 2 * 2 * lanes * 2;
  const double mhz = cpu.mhz > 0 ? cpu.mhz : 2000;
  Peaks p;
  p.f32 = threads * mhz * 1e6 * f32;
  p.int8 = threads * mhz * 1e6 * int8;
  p.how = fmt::format("nominal: {} threads x {:.0f} MHz ({}) x {:.0f} int8 ops / {:.0f} f32 FLOP per cycle per core ({}: two "
                      "FMA pipes of {} f32 lanes{}); only flops x efficiency is measured, by the fit",
                      threads, mhz, cpu.mhz > 0 ? "/proc/cpuinfo cpu MHz" : "assumed", int8, f32,
                      cpu.avx512 ? "AVX-512" : cpu.avx2 ? "AVX2" : "SSE", int(lanes), cpu.vnni ? ", VNNI dot products" : "");
  return p;
}

// Minimises f over the box [lo, hi] by Nelder-Mead (points clamped into the box).
std::vector<double> nelder_mead(const std::function<double(const std::vector<double>&)>& f, std::vector<double> x0,
                                const std::vector<double>& lo, const std::vector<double>& hi, double step, int32_t max_evals,
                                int32_t& evals) {
  const size_t n = x0.size();
  auto clamp = [&](std::vector<double> x) {
    for (size_t i = 0; i < n; ++i) x[i] = std::clamp(x[i], lo[i], hi[i]);
    return x;
  };
  auto eval = [&](const std::vector<double>& x) {
    ++evals;
    return f(x);
  };
  std::vector<std::vector<double>> pts{clamp(x0)};
  for (size_t i = 0; i < n; ++i) {
    std::vector<double> x = pts[0];
    x[i] += (x[i] + step <= hi[i]) ? step : -step;
    pts.push_back(clamp(x));
  }
  std::vector<double> val;
  for (const auto& p : pts) val.push_back(eval(p));
  for (int32_t it = 0; evals < max_evals; ++it) {
    std::vector<size_t> order(n + 1);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return val[a] < val[b]; });
    std::vector<std::vector<double>> p2;
    std::vector<double> v2;
    for (size_t i : order) p2.push_back(pts[i]), v2.push_back(val[i]);
    pts.swap(p2);
    val.swap(v2);
    if (val[n] - val[0] < 1e-12 * (1 + std::abs(val[0]))) {
      double spread = 0;
      for (size_t i = 1; i <= n; ++i)
        for (size_t k = 0; k < n; ++k) spread = std::max(spread, std::abs(pts[i][k] - pts[0][k]));
      if (spread < 1e-7) break;
    }
    std::vector<double> centroid(n, 0);
    for (size_t i = 0; i < n; ++i)
      for (size_t k = 0; k < n; ++k) centroid[k] += pts[i][k] / double(n);
    auto along = [&](double t) {
      std::vector<double> x(n);
      for (size_t k = 0; k < n; ++k) x[k] = centroid[k] + t * (pts[n][k] - centroid[k]);
      return clamp(x);
    };
    const std::vector<double> xr = along(-1);
    const double fr = eval(xr);
    if (fr < val[0]) {
      const std::vector<double> xe = along(-2);
      const double fe = eval(xe);
      if (fe < fr) pts[n] = xe, val[n] = fe;
      else pts[n] = xr, val[n] = fr;
    } else if (fr < val[n - 1]) {
      pts[n] = xr, val[n] = fr;
    } else {
      const std::vector<double> xc = fr < val[n] ? along(-0.5) : along(0.5);
      const double fc = eval(xc);
      if (fc < std::min(fr, val[n])) {
        pts[n] = xc, val[n] = fc;
      } else {
        for (size_t i = 1; i <= n; ++i) {
          for (size_t k = 0; k < n; ++k) pts[i][k] = pts[0][k] + 0.5 * (pts[i][k] - pts[0][k]);
          pts[i] = clamp(pts[i]);
          val[i] = eval(pts[i]);
        }
      }
    }
  }
  return pts[size_t(std::min_element(val.begin(), val.end()) - val.begin())];
}

std::string join_commands(const std::vector<BenchModelRun>& runs) {
  std::vector<std::string> parts;
  for (const BenchModelRun& r : runs) parts.push_back(fmt::format("`{}` ({})", r.command, r.file));
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace

double predict_step_seconds(const Hardware& hw, const ModelShape& model, const Precision& precision, const BenchMeasurement& m) {
  return Predictor(model, precision, hw).step(m);
}

Calibration calibrate(const CalibrationInput& in) {
  if (in.runs.empty()) fail("calibrate: no bench model results");
  const int32_t threads = in.runs[0].threads;
  for (const BenchModelRun& r : in.runs)
    if (r.threads != threads)
      fail("calibrate: {} ran on {} threads, {} on {}: a profile is one device, one thread count; calibrate each separately",
           in.runs[0].file, threads, r.file, r.threads);
  std::vector<const BenchMeasurement*> ms;
  std::vector<std::string> run_of;
  double bw_sum = 0;
  for (const BenchModelRun& r : in.runs) {
    bw_sum += r.memory_bandwidth;
    for (const BenchMeasurement& m : r.measurements) ms.push_back(&m), run_of.push_back(r.file);
  }
  const Peaks peaks = nominal_peaks(in.cpu, threads);

  Hardware hw;
  hw.name = in.name;
  hw.devices_per_node = 1;
  hw.mem_bw = bw_sum / double(in.runs.size());
  hw.mem_gib = in.cpu.mem_gib > 0 ? in.cpu.mem_gib : 16;
  hw.flops = {{"int8", peaks.int8}, {"f32", peaks.f32}};
  // The cost model runs the weight GEMMs at the activations' type (int8 for quantized
  // weights, f32 for f32 ones) and attention at f32.
  const std::string gemm_type = in.precision.compute_type();
  if (!hw.flops.count(gemm_type))
    fail("calibrate: activations {} compute in {}, which a CPU profile does not fit (int8 or f32)", in.precision.activations,
         gemm_type);
  const double gemm_peak = hw.flops.at(gemm_type);
  const Link link = in.kv_link ? in.kv_link->link : default_kv_link();
  hw.scale_up = hw.scale_out = link;
  hw.efficiency.scale_up = hw.efficiency.scale_out = 1;

  // x: log effective GEMM FLOP/s, log effective attention FLOP/s, log eff.memory, log
  // eff.attention_memory, log layer_us, log step_us.
  const std::vector<double> lo = {std::log(1e9), std::log(1e8), std::log(0.02), std::log(0.02), std::log(0.01), std::log(0.01)};
  const std::vector<double> hi = {std::log(2 * gemm_peak), std::log(2 * peaks.f32), 0, 0, std::log(5000), std::log(1e5)};
  // Step times are predicted at the KV dtype the runs held their cache in.
  Precision precision = in.precision;
  precision.kv_cache = in.runs[0].kv_cache;
  for (const BenchModelRun& r : in.runs)
    if (r.kv_cache != precision.kv_cache)
      fail("calibrate: {} held its KV cache in {}, {} in {}: give runs of one --kv-cache-dtype", in.runs[0].file,
           precision.kv_cache, r.file, r.kv_cache);
  Predictor pred(in.model, precision, hw);
  auto apply = [&](const std::vector<double>& x, Hardware& h) {
    const double gemm = std::exp(x[0]), attention = std::exp(x[1]);
    // A peak the fit finds exceeded is raised to what was reached (efficiency 1).
    h.flops = {{"int8", peaks.int8}, {"f32", peaks.f32}};
    h.flops[gemm_type] = std::max(h.flops[gemm_type], gemm);
    h.flops["f32"] = std::max(h.flops["f32"], attention);
    h.efficiency.gemm = gemm / h.flops[gemm_type];
    h.efficiency.attention_compute = attention / h.flops["f32"];
    h.efficiency.memory = std::exp(x[2]);
    h.efficiency.attention_memory = std::exp(x[3]);
    h.layer_overhead_s = std::exp(x[4]) * 1e-6;
    h.step_overhead_s = std::exp(x[5]) * 1e-6;
  };
  auto objective = [&](const std::vector<double>& x) {
    apply(x, pred.hardware());
    double sum = 0;
    for (const BenchMeasurement* m : ms) {
      const double e = std::log(pred.step(*m) / m->step_s);
      sum += e * e;
    }
    return sum / double(ms.size());
  };
  int32_t evals = 0;
  std::vector<double> best;
  double best_value = 1e300;
  // A few starts across the box, each polished by restarts from where it ended.
  const std::array<std::array<double, 2>, 3> starts = {{{0.3, 0.3}, {0.1, 0.6}, {0.6, 0.1}}};
  for (const auto& s : starts) {
    std::vector<double> x = {std::log(s[0] * gemm_peak), std::log(s[1] * peaks.f32), std::log(0.7), std::log(0.5), std::log(20),
                             std::log(200)};
    for (int restart = 0; restart < 3; ++restart) x = nelder_mead(objective, x, lo, hi, restart == 0 ? 0.7 : 0.2, evals + 3000, evals);
    const double v = objective(x);
    if (v < best_value) best_value = v, best = x;
  }

  Calibration out;
  out.hardware = hw;
  apply(best, out.hardware);
  out.evaluations = evals;
  out.rms_log_error = std::sqrt(best_value);
  pred.hardware() = out.hardware;
  for (size_t i = 0; i < ms.size(); ++i) out.rows.push_back({run_of[i], ms[i]->label, ms[i]->step_s, pred.step(*ms[i])});

  Hardware& h = out.hardware;
  const std::string where = fmt::format("on {} ({} threads; {}; matmul {}, attention {}) on {}", in.cpu.model, threads,
                                        in.runs[0].cpu_features, in.runs[0].matmul_backend, in.runs[0].attention_backend, in.date);
  const std::string fitted = fmt::format("fitted by `moengine sim calibrate` to the runs of sources.calibration (cost-model step "
                                         "times vs {} measured ones, rms log error {:.1f}%)",
                                         ms.size(), 100 * out.rms_log_error);
  h.sources["calibration"] = fmt::format("{} {}", join_commands(in.runs), where);
  h.description = fmt::format("{}, {} threads (this machine's CPU as one device), calibrated on {} from `moengine bench model` runs",
                              in.cpu.model, threads, in.model.name);
  h.sources["devices_per_node"] = "one CPU: the device is the machine's cores at the benches' thread count";
  h.sources["flops"] = peaks.how + (h.flops[gemm_type] > gemm_peak || h.flops["f32"] > peaks.f32 ? " (raised to the fitted figure, which exceeded it)" : "");
  std::vector<std::string> bws;
  for (const BenchModelRun& r : in.runs) bws.push_back(fmt::format("{:.1f}", r.memory_bandwidth / kGB));
  h.sources["mem_bw"] = fmt::format("`moengine bench model` memory_bandwidth_gbps (a 1 GiB buffer read, mean beside the tg runs) "
                                    "of the runs of sources.calibration, mean of {} GB/s", fmt::join(bws, ", "));
  h.sources["mem_gib"] = "/proc/meminfo MemTotal";
  const std::string link_source = in.kv_link ? in.kv_link->source
                                             : "default (no --kv-transfer given): TCP loopback measured by `moengine bench kv-transfer "
                                               "--transports tcp` on a 2-vCPU AMD EPYC (Zen 5) VM, 2.0-2.7 GB/s for 1-64 MiB, ~60 us";
  h.sources["scale_up"] = "the KV link between instances on this host: " + link_source;
  h.sources["scale_out"] = "as scale_up (one host: every transfer stays on it)";
  h.sources["efficiency.scale_up"] = "1: the link figure is a measured transfer rate, not a peak";
  h.sources["efficiency.scale_out"] = "1: as scale_up";
  for (const char* key : {"efficiency.gemm", "efficiency.memory", "efficiency.attention_compute", "efficiency.attention_memory",
                          "overhead.layer_us", "overhead.step_us"})
    h.sources[key] = fitted;
  h.wake_s = in.wake ? in.wake->wake_s : 0;
  h.sources["overhead.wake_us"] = in.wake ? in.wake->source : "0: not measured (no --wake-metrics given)";
  return out;
}

std::string hardware_yaml(const Calibration& c, const std::string& comment) {
  const Hardware& h = c.hardware;
  auto quote = [](const std::string& s) {
    std::string q = "\"";
    for (char ch : s) {
      if (ch == '"' || ch == '\\') q += '\\';
      q += ch;
    }
    return q + "\"";
  };
  // Efficiencies rounded down, so that they stay within (0, 1].
  auto eff = [](double v) { return fmt::format("{:.4f}", std::max(1e-4, std::floor(v * 1e4) / 1e4)); };
  std::string y;
  std::istringstream lines(comment);
  for (std::string line; std::getline(lines, line);) y += "# " + line + "\n";
  y += fmt::format("name: {}\n", h.name);
  y += fmt::format("description: {}\n", quote(h.description));
  y += fmt::format("devices_per_node: {}\n", h.devices_per_node);
  y += fmt::format("flops: {{int8: {:.4e}, f32: {:.4e}}}\n", h.flops.at("int8"), h.flops.at("f32"));
  y += fmt::format("mem_bw: {:.4e}\n", h.mem_bw);
  y += fmt::format("mem_gib: {:.1f}\n", h.mem_gib);
  y += fmt::format("scale_up: {{bw: {:.4e}, latency_us: {:.2f}}}\n", h.scale_up.bw, h.scale_up.latency_s * 1e6);
  y += fmt::format("scale_out: {{bw: {:.4e}, latency_us: {:.2f}}}\n", h.scale_out.bw, h.scale_out.latency_s * 1e6);
  y += "efficiency:\n";
  y += fmt::format("  gemm: {}\n  memory: {}\n  attention_compute: {}\n  attention_memory: {}\n  scale_up: {}\n  scale_out: {}\n",
                   eff(h.efficiency.gemm), eff(h.efficiency.memory), eff(h.efficiency.attention_compute),
                   eff(h.efficiency.attention_memory), eff(h.efficiency.scale_up), eff(h.efficiency.scale_out));
  y += fmt::format("overhead:\n  layer_us: {:.3f}\n  step_us: {:.2f}\n  wake_us: {:.1f}\n", h.layer_overhead_s * 1e6,
                   h.step_overhead_s * 1e6, h.wake_s * 1e6);
  y += "sources:\n";
  for (const auto& [k, v] : h.sources) y += fmt::format("  {}: {}\n", k, quote(v));
  return y;
}

}  // namespace moe::sim
