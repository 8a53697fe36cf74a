// Decode attention over 4096 cached positions for DeepSeek's absorbed MLA (16 heads of one
// 576-float latent row) and Qwen3-MoE's GQA (32 query heads over 4 kv heads of 128), with
// the cache stored in each KV dtype (second argument: f32, f16, bf16, fp8_e4m3, q8_0).
//
// Each iteration decodes one token for the next of several sequences whose caches together
// are about 3x the L3 cache, as a decode step over a batch does, so the KV is streamed
// from memory. Reported: GB/s of KV read (each stored byte counted once), next to a peer
// measured in the same run -- a plain parallel read of the same caches -- whose GB/s is
// what the memory system delivers here: decode kv_GBps over the peer's is the fraction of
// the bandwidth limit reached.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"

namespace moe {
namespace {

constexpr int64_t kPositions = 4096;
constexpr int64_t kBlockSize = 64;
constexpr int64_t kCacheBytesTarget = int64_t(96) << 20;

struct Shape {
  AttentionShape attn;
  std::vector<int64_t> segments;  // of a cached row
};

Shape mla_shape() {
  AttentionShape s;
  s.n_q_heads = 16;
  s.n_kv_heads = 1;
  s.dk = 576;
  s.dv = 512;
  s.scale = 1.0f / 13.856f;  // 1 / sqrt(192), DeepSeek's qk head dim
  return {s, {512, 64}};
}

Shape gqa_shape() {
  AttentionShape s;
  s.n_q_heads = 32;
  s.n_kv_heads = 4;
  s.dk = s.dv = 128;
  s.k_head_stride = s.v_head_stride = 128;
  s.v_offset = 4 * 128;
  s.scale = 1.0f / 11.3137f;
  return {s, std::vector<int64_t>(8, 128)};
}

constexpr KvDtype kDtypes[] = {KvDtype::f32, KvDtype::f16, KvDtype::bf16, KvDtype::fp8_e4m3, KvDtype::q8_0};

struct Sequence {
  std::vector<std::unique_ptr<uint8_t[]>> blocks;
  std::vector<const uint8_t*> table;
  KvView view;
};

struct Fixture {
  Shape shape;
  KvRowFormat format;
  std::vector<Sequence> seqs;
  std::vector<float> q, out;

  Fixture(const Shape& sh, KvDtype dtype) : shape(sh), format(dtype, sh.segments) {
    const int64_t block_bytes = kBlockSize * format.bytes();
    const int64_t n_seqs = (kCacheBytesTarget + kPositions * format.bytes() - 1) / (kPositions * format.bytes());
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> row(size_t(format.floats()));
    seqs.resize(size_t(n_seqs));
    for (Sequence& seq : seqs) {
      for (int64_t b = 0; b < kPositions / kBlockSize; ++b) {
        seq.blocks.emplace_back(new uint8_t[size_t(block_bytes)]);
        for (int64_t p = 0; p < kBlockSize; ++p) {
          for (float& x : row) x = dist(rng);
          format.encode(row.data(), seq.blocks.back().get() + p * format.bytes());
        }
        seq.table.push_back(seq.blocks.back().get());
      }
      seq.view = KvView{seq.table.data(), kBlockSize, format.bytes(), &format};
    }
    q.resize(size_t(sh.attn.n_q_heads * sh.attn.dk));
    for (float& x : q) x = dist(rng);
    out.resize(size_t(sh.attn.n_q_heads * sh.attn.dv));
  }

  double kv_bytes_per_decode() const { return double(kPositions * format.bytes()); }
};

Fixture& fixture(bool mla, int64_t dtype_index) {
  static std::vector<std::unique_ptr<Fixture>> made(2 * std::size(kDtypes));
  std::unique_ptr<Fixture>& f = made[size_t(dtype_index) * 2 + (mla ? 1 : 0)];
  if (!f) f = std::make_unique<Fixture>(mla ? mla_shape() : gqa_shape(), kDtypes[dtype_index]);
  return *f;
}

void decode(benchmark::State& state, bool mla, bool reference) {
  Fixture& f = fixture(mla, state.range(1));
  ThreadPool pool(int(state.range(0)));
  size_t next = 0;
  for (auto _ : state) {
    const Sequence& seq = f.seqs[next++ % f.seqs.size()];
    if (reference) {
      attention_ref(f.shape.attn, f.q.data(), 0, 1, kPositions - 1, seq.view, f.out.data(), 0);
    } else {
      attention(f.shape.attn, f.q.data(), 0, 1, kPositions - 1, seq.view, f.out.data(), 0, pool);
    }
    benchmark::DoNotOptimize(f.out.data());
    benchmark::ClobberMemory();
  }
  state.counters["kv_GBps"] = benchmark::Counter(f.kv_bytes_per_decode() * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(reference ? "reference" : attention_backend_name()) + " " + kv_dtype_name(f.format.dtype()));
}

__attribute__((target("avx2"))) float sum_rows_avx2(const float* p, int64_t n) {
  n /= 4;  // floats in the bytes
  __m256 a = _mm256_setzero_ps(), b = a, c = a, d = a;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a = _mm256_add_ps(a, _mm256_loadu_ps(p + i));
    b = _mm256_add_ps(b, _mm256_loadu_ps(p + i + 8));
    c = _mm256_add_ps(c, _mm256_loadu_ps(p + i + 16));
    d = _mm256_add_ps(d, _mm256_loadu_ps(p + i + 24));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)));
  float s = 0.0f;
  for (float x : lanes) s += x;
  for (; i < n; ++i) s += p[i];
  return s;
}

float sum_rows_generic(const float* p, int64_t n) {
  n /= 4;
  float s[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += p[i + j];
  for (; i < n; ++i) s[0] += p[i];
  return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

// The peer: read the same blocks, split over the same pool, doing nothing but adding.
void stream(benchmark::State& state, bool mla) {
  Fixture& f = fixture(mla, state.range(1));
  ThreadPool pool(int(state.range(0)));
  const bool avx2 = cpu_features().has_avx2_fma();
  const int64_t block_bytes = kBlockSize * f.format.bytes();
  size_t next = 0;
  std::vector<float> partial(size_t(kPositions / kBlockSize));
  for (auto _ : state) {
    const Sequence& seq = f.seqs[next++ % f.seqs.size()];
    pool.parallel_for(int64_t(seq.table.size()), 4, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        partial[size_t(i)] = avx2 ? sum_rows_avx2(reinterpret_cast<const float*>(seq.table[size_t(i)]), block_bytes)
                                  : sum_rows_generic(reinterpret_cast<const float*>(seq.table[size_t(i)]), block_bytes);
    });
    benchmark::DoNotOptimize(partial.data());
  }
  state.counters["kv_GBps"] = benchmark::Counter(f.kv_bytes_per_decode() * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void BM_MlaDecode4k(benchmark::State& s) { decode(s, true, false); }
void BM_GqaDecode4k(benchmark::State& s) { decode(s, false, false); }
void BM_MlaDecode4kReference(benchmark::State& s) { decode(s, true, true); }
void BM_GqaDecode4kReference(benchmark::State& s) { decode(s, false, true); }
void BM_MlaStreamPeer(benchmark::State& s) { stream(s, true); }
void BM_GqaStreamPeer(benchmark::State& s) { stream(s, false); }

// Args: pool threads (0: one per core), KV dtype (index into kDtypes).
void every_dtype(benchmark::internal::Benchmark* b, std::initializer_list<int64_t> threads) {
  for (int64_t d = 0; d < int64_t(std::size(kDtypes)); ++d)
    for (int64_t t : threads) b->Args({t, d});
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK(BM_MlaStreamPeer)->Apply([](auto* b) { every_dtype(b, {1, 0}); });
BENCHMARK(BM_MlaDecode4k)->Apply([](auto* b) { every_dtype(b, {1, 0}); });
BENCHMARK(BM_MlaDecode4kReference)->Args({1, 0})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_GqaStreamPeer)->Apply([](auto* b) { every_dtype(b, {1, 0}); });
BENCHMARK(BM_GqaDecode4k)->Apply([](auto* b) { every_dtype(b, {1, 0}); });
BENCHMARK(BM_GqaDecode4kReference)->Args({1, 0})->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace moe

BENCHMARK_MAIN();
