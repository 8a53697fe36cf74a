// Matmul throughput per weight type, against the machine's memory-read bandwidth.
//
//   ninja -C build matmul_bench && build/bench/matmul_bench [--benchmark_filter=Gemv]
//
// Gemv (1 token, decode) reads weights that are not in any cache: each iteration uses the
// next of enough copies of the matrix to exceed the last-level cache, as a decode step
// does walking the layers. Its counters: GB/s of weight bytes read, and `roofline`, that
// rate over the plain read bandwidth measured at start-up with the same thread count.
// GemvCached runs the same GEMV on one cache-resident matrix: the compute ceiling, which
// should sit well above the memory roofline. Batch16 is batched decode: 16 tokens against
// the same cold weights, with Gemv's counters plus GFLOP/s.
// Gemm (64 and 512 tokens, prefill) reuses one matrix and reports GFLOP/s (2 per
// multiply-add). Shapes: 2048x2048 (attention/dense), 384x2048 and 2048x384 (one expert's
// gate/up and down).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/cpu_features.h"
#include "core/huge_pages.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/membw.h"
#include "kernels/regrouped.h"
#include "kernels/quant.h"

namespace moe {
namespace {

constexpr size_t kColdBytes = size_t(384) << 20;  // far above the 32 MiB L3 of our machines

ThreadPool& pool(int n) {
  static std::map<int, std::unique_ptr<ThreadPool>> pools;
  auto& p = pools[n];
  if (!p) p = std::make_unique<ThreadPool>(n);
  return *p;
}

std::map<int, double>& read_bandwidth() {
  static std::map<int, double> bw;
  return bw;
}

// Copies of one quantized matrix, back to back.
struct Matrices {
  GgmlType type;
  int64_t rows, cols;
  size_t bytes_each;
  std::shared_ptr<uint8_t> data;  // in huge pages, as the loader places weights
  int copies;
  QMatrix copy(int i) const {
    return make_qmatrix(type, rows, cols, data.get() + size_t(i) * bytes_each);
  }
};

const Matrices& matrices(GgmlType t, int64_t rows, int64_t cols, bool cold) {
  static std::map<std::tuple<int, int64_t, int64_t, bool>, std::unique_ptr<Matrices>> cache;
  auto& m = cache[{int(t), rows, cols, cold}];
  if (m) return *m;
  m = std::make_unique<Matrices>();
  m->type = t;
  m->rows = rows;
  m->cols = cols;
  m->bytes_each = row_bytes(t, cols) * size_t(rows);
  m->copies = cold ? int(kColdBytes / m->bytes_each) + 1 : 1;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> row(static_cast<size_t>(cols));
  // The regrouped types are their plain types regrouped, as the loader makes them.
  const GgmlType stored = plain_type(t);
  std::vector<uint8_t> one(m->bytes_each);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = dist(rng);
    quantize_row(stored, row.data(), one.data() + size_t(r) * row_bytes(t, cols), cols);
  }
  if (stored != t) {
    std::vector<uint8_t> grouped(one.size());
    regroup(make_qmatrix(stored, rows, cols, one.data()), grouped.data());
    one.swap(grouped);
  }
  m->data = allocate_huge_pages(m->bytes_each * size_t(m->copies), "benchmark matrices");
  for (int i = 0; i < m->copies; ++i) std::copy(one.begin(), one.end(), m->data.get() + size_t(i) * m->bytes_each);
  return *m;
}

// cold: rotate over copies of the matrix exceeding the caches (decode streams every
// weight from memory once); otherwise one matrix, cache-resident after the first pass.
void run_matmul(benchmark::State& state, GgmlType t, int64_t rows, int64_t cols, int64_t n_tokens,
                int threads, bool cold) {
  const Matrices& m = matrices(t, rows, cols, cold);
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(size_t(n_tokens * cols)), y(size_t(n_tokens * rows));
  for (auto& v : x) v = dist(rng);
  ThreadPool& p = pool(threads);
  PackedActs packed;
  packed.pack(t, x.data(), n_tokens, cols, cols);
  int i = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    matmul_packed(m.copy(i), packed, y.data(), rows, p);
    benchmark::DoNotOptimize(y.data());
    if (++i == m.copies) i = 0;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double iters = double(state.iterations());
  const double gbps = iters * double(m.bytes_each) / secs / 1e9;
  state.counters["GB/s"] = gbps;
  state.counters["GFLOP/s"] = iters * 2.0 * double(rows * cols * n_tokens) / secs / 1e9;
  if (cold && read_bandwidth().count(threads) != 0) state.counters["roofline"] = gbps / read_bandwidth()[threads];
  state.SetLabel(matmul_backend_name());
}

void mem_read(benchmark::State& state) {
  const int threads = int(state.range(0));
  double gbps = 0;
  for (auto _ : state) gbps = measure_read_bandwidth_gbps(pool(threads), size_t(1) << 30);
  state.counters["GB/s"] = gbps;
}

void register_all() {
  BENCHMARK(mem_read)->Name("MemRead/1GiB")->Arg(1)->Arg(2)->Iterations(1)->Unit(benchmark::kMillisecond);
  const GgmlType types[] = {GgmlType::Q8_0, GgmlType::Q8_0_R16, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q5_0_R16, GgmlType::Q4_1,
                            GgmlType::Q5_1, GgmlType::Q4_K, GgmlType::Q4_K_R16, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q6_K_R16,
                            GgmlType::F16,  GgmlType::BF16, GgmlType::F32,  GgmlType::F8_E4M3_B128};
  const std::pair<int64_t, int64_t> shapes[] = {{2048, 2048}, {384, 2048}, {2048, 384}};
  for (GgmlType t : types) {
    for (auto [rows, cols] : shapes) {
      const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
      for (int threads : {1, 2}) {
        benchmark::RegisterBenchmark(("Gemv/" + std::string(type_name(t)) + "/" + shape + "/threads:" +
                                      std::to_string(threads)).c_str(),
                                     [=](benchmark::State& s) { run_matmul(s, t, rows, cols, 1, threads, true); })
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
        benchmark::RegisterBenchmark(("Batch16/" + std::string(type_name(t)) + "/" + shape + "/threads:" +
                                      std::to_string(threads)).c_str(),
                                     [=](benchmark::State& s) { run_matmul(s, t, rows, cols, 16, threads, true); })
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
      if (rows == cols) {
        benchmark::RegisterBenchmark(("GemvCached/" + std::string(type_name(t)) + "/" + shape + "/threads:1").c_str(),
                                     [=](benchmark::State& s) { run_matmul(s, t, rows, cols, 1, 1, false); })
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
      for (int64_t n : {64, 512}) {
        benchmark::RegisterBenchmark(("Gemm/" + std::string(type_name(t)) + "/" + shape + "/tokens:" +
                                      std::to_string(n) + "/threads:2").c_str(),
                                     [=](benchmark::State& s) { run_matmul(s, t, rows, cols, n, 2, false); })
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
    }
  }
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  std::printf("matmul backend: %s (%s)\n", moe::matmul_backend_name(), moe::cpu_features().describe().c_str());
  for (int threads : {1, 2}) {
    const double bw = moe::measure_read_bandwidth_gbps(moe::pool(threads), size_t(1) << 30);
    moe::read_bandwidth()[threads] = bw;
    std::printf("memory read bandwidth, %d thread(s): %.2f GB/s\n", threads, bw);
  }
  moe::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
