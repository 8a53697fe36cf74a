// The flash-style paged attention against the two-pass double reference, for the GQA and
// absorbed-MLA layouts, ragged head sizes, several block sizes and causal prefill chunks.
#include "kernels/attention.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"

namespace moe {
namespace {

// One sequence's cache: blocks allocated separately and listed in shuffled order, rows
// stored in `format` and padded past their size so that row_stride is not the row size.
struct PagedCache {
  KvRowFormat format;
  std::vector<std::vector<uint8_t>> storage;
  std::vector<const uint8_t*> table;
  KvView view;

  PagedCache(int64_t n_pos, KvRowFormat fmt, int64_t block_size, std::mt19937& rng,
             float (*value)(int64_t pos, int64_t col, std::mt19937& rng))
      : format(std::move(fmt)) {
    const int64_t n_blocks = (n_pos + block_size - 1) / block_size;
    const int64_t stride = format.bytes() + 3;
    storage.resize(size_t(n_blocks));
    for (auto& b : storage) b.assign(size_t(block_size * stride), 0xFF);  // padding is poison (NaN in every dtype)
    std::vector<size_t> order(static_cast<size_t>(n_blocks));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<float> row(size_t(format.floats()));
    for (int64_t p = 0; p < n_pos; ++p) {
      for (int64_t c = 0; c < format.floats(); ++c) row[size_t(c)] = value(p, c, rng);
      format.encode(row.data(), storage[order[size_t(p / block_size)]].data() + (p % block_size) * stride);
    }
    for (size_t b : order) table.push_back(storage[b].data());
    view = KvView{table.data(), block_size, stride, &format};
  }
  PagedCache(const PagedCache&) = delete;
  PagedCache& operator=(const PagedCache&) = delete;
};

constexpr KvDtype kDtypes[] = {KvDtype::f32, KvDtype::f16, KvDtype::bf16, KvDtype::fp8_e4m3, KvDtype::q8_0};

float uniform_value(int64_t, int64_t, std::mt19937& rng) {
  return std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
}
// Keys that grow along the sequence: the running max rises chunk after chunk.
float growing_value(int64_t pos, int64_t, std::mt19937& rng) {
  return std::uniform_real_distribution<float>(0.0f, 1.0f)(rng) * (1.0f + 0.05f * float(pos));
}
// And shrinking ones: the first chunk holds the max, later ones only add.
float shrinking_value(int64_t pos, int64_t, std::mt19937& rng) {
  return std::uniform_real_distribution<float>(0.0f, 1.0f)(rng) * 8.0f / (1.0f + float(pos));
}

struct Layout {
  const char* name;
  AttentionShape shape;
  std::vector<int64_t> segments;  // of a row: each head's key and value, MLA's latent and rope
  KvRowFormat format(KvDtype d) const { return KvRowFormat(d, segments); }
};

// Row = [K of every kv head | V of every kv head] (the Qwen3-MoE cache layout).
Layout gqa(const char* name, int n_q, int n_kv, int64_t dk, int64_t dv) {
  AttentionShape s;
  s.n_q_heads = n_q;
  s.n_kv_heads = n_kv;
  s.dk = dk;
  s.dv = dv;
  s.k_offset = 0;
  s.k_head_stride = dk;
  s.v_offset = n_kv * dk;
  s.v_head_stride = dv;
  s.scale = 1.0f / std::sqrt(float(dk));
  std::vector<int64_t> segments(size_t(n_kv), dk);
  segments.insert(segments.end(), size_t(n_kv), dv);
  return {name, s, segments};
}

// One latent row per position, the key is all of it and the value its first dv floats.
Layout mla(const char* name, int n_q, int64_t latent, int64_t rope) {
  AttentionShape s;
  s.n_q_heads = n_q;
  s.n_kv_heads = 1;
  s.dk = latent + rope;
  s.dv = latent;
  s.scale = 1.0f / std::sqrt(float(latent / 4 + rope));
  return {name, s, {latent, rope}};
}

std::vector<Layout> layouts() {
  std::vector<Layout> out = {
      gqa("qwen3-moe", 32, 4, 128, 128), gqa("gqa-small", 8, 2, 16, 16),
      gqa("gqa-odd", 6, 3, 13, 7),       gqa("mha", 3, 3, 24, 20),
      gqa("mqa-ragged", 5, 1, 9, 17),    mla("deepseek-mla", 16, 512, 64),
      mla("mla-odd", 5, 29, 8),
      // Enough heads per kv head for the AVX-512 scores with rows in the lanes, in groups
      // of 16 rows that straddle tokens, with ragged dims.
      mla("mla-wide-odd", 20, 29, 8),
      // A key of three slabs of the bf16 narrow-group scores (64 dim pairs each, the last short).
      gqa("gqa-long-keys", 6, 2, 290, 40),
  };
  // K and V of each head side by side: [k0 v0 k1 v1].
  Layout interleaved = gqa("gqa-kv-interleaved", 4, 2, 12, 10);
  interleaved.shape.k_head_stride = interleaved.shape.v_head_stride = 22;
  interleaved.shape.v_offset = 12;
  interleaved.segments = {12, 10, 12, 10};
  out.push_back(interleaved);
  return out;
}

// Where the kernel reads bf16 rows with bf16 dot products: AVX512_BF16, an even key size.
bool uses_bf16_dot_products(const Layout& lay, KvDtype dtype) {
  return std::string(attention_backend_name()) == "avx512-bf16" && dtype == KvDtype::bf16 && lay.shape.dk % 2 == 0;
}

void compare(const Layout& lay, KvDtype dtype, int64_t block_size, int64_t pos0, int64_t n_tokens,
             ThreadPool& pool, float (*value)(int64_t, int64_t, std::mt19937&), uint32_t seed) {
  const AttentionShape& s = lay.shape;
  std::mt19937 rng(seed);
  PagedCache cache(pos0 + n_tokens, lay.format(dtype), block_size, rng, value);
  const int64_t q_stride = s.n_q_heads * s.dk + 1, out_stride = s.n_q_heads * s.dv + 2;
  std::vector<float> q(size_t(n_tokens * q_stride));
  for (float& x : q) x = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  std::vector<float> out(size_t(n_tokens * out_stride), -7.0f), ref = out;
  attention(s, q.data(), q_stride, n_tokens, pos0, cache.view, out.data(), out_stride, pool);
  // The bf16 dot products round the queries and the softmax weights to bf16: the reference
  // gets the same queries, and each output may move by the weights' rounding (2^-9 of a
  // weighted mean of values within [-1, 1]; a little more for the growing ones).
  const bool bf16_dot = uses_bf16_dot_products(lay, dtype);
  std::vector<float> ref_q = q;
  if (bf16_dot)
    for (float& x : ref_q) x = bf16_to_f32(f32_to_bf16(x));
  attention_ref(s, ref_q.data(), q_stride, n_tokens, pos0, cache.view, ref.data(), out_stride);
  const float tolerance = bf16_dot ? 2e-3f : 3e-5f;
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_NEAR(out[i], ref[i], tolerance * std::max(1.0f, std::fabs(ref[i])))
        << lay.name << " " << kv_dtype_name(dtype) << " block " << block_size << " pos0 " << pos0 << " tokens " << n_tokens
        << " threads " << pool.size() << " at token " << i / size_t(out_stride) << " col "
        << i % size_t(out_stride);
  }
}

// Every dtype: the kernel converts what it reads as the reference does, so the two agree
// as closely as on f32 rows.
TEST(Attention, MatchesReference) {
  ThreadPool one(1), three(3);
  uint32_t seed = 10;
  for (const KvDtype dtype : kDtypes) {
    for (const Layout& lay : layouts()) {
      for (int64_t block_size : {1, 16, 64}) {
        for (auto [pos0, n_tokens] : {std::pair{0, 1}, {0, 7}, {1, 1}, {37, 3}, {70, 9}, {200, 1}}) {
          ++seed;
          compare(lay, dtype, block_size, pos0, n_tokens, seed % 2 ? one : three, uniform_value, seed);
        }
      }
    }
  }
}

// Past 1024 positions the kernel splits the context into segments and merges them; these
// cross the first two boundaries, with rows on either side of one in the same call.
TEST(Attention, LongContextsMatchReference) {
  ThreadPool one(1), three(3);
  uint32_t seed = 100;
  for (const KvDtype dtype : kDtypes) {
    for (const Layout& lay : layouts()) {
      for (auto [pos0, n_tokens] : {std::pair{1020, 9}, {2047, 2}, {3000, 1}}) {
        ++seed;
        compare(lay, dtype, seed % 3 ? 64 : 1, pos0, n_tokens, seed % 2 ? one : three, uniform_value, seed);
      }
    }
  }
}

TEST(Attention, RunningMaxRisesAndFalls) {
  ThreadPool pool(2);
  for (const Layout& lay : {layouts()[1], layouts()[5]}) {
    for (const KvDtype dtype : kDtypes) {
      compare(lay, dtype, 16, 150, 4, pool, growing_value, 1);
      compare(lay, dtype, 16, 150, 4, pool, shrinking_value, 2);
    }
  }
}

// A row's result must not depend on which rows share its tile or on the thread count:
// the engine promises token-for-token equality between batched and lone decoding.
TEST(Attention, PrefillChunkEqualsTokenByToken) {
  ThreadPool one(1), three(3);
  for (const KvDtype dtype : {KvDtype::f32, KvDtype::bf16, KvDtype::q8_0})
  for (const Layout& lay : layouts()) {
    const AttentionShape& s = lay.shape;
    std::mt19937 rng(99);
    const int64_t n_tokens = 6;
    for (int64_t pos0 : {45, 1020}) {
      PagedCache cache(pos0 + n_tokens, lay.format(dtype), 16, rng, uniform_value);
      const int64_t q_stride = s.n_q_heads * s.dk, out_stride = s.n_q_heads * s.dv;
      std::vector<float> q(size_t(n_tokens * q_stride));
      for (float& x : q) x = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
      std::vector<float> chunk(size_t(n_tokens * out_stride)), single(chunk.size());
      attention(s, q.data(), q_stride, n_tokens, pos0, cache.view, chunk.data(), out_stride, three);
      for (int64_t t = 0; t < n_tokens; ++t) {
        attention(s, q.data() + t * q_stride, q_stride, 1, pos0 + t, cache.view,
                  single.data() + t * out_stride, out_stride, one);
      }
      EXPECT_EQ(chunk, single) << lay.name << " " << kv_dtype_name(dtype) << " pos0 " << pos0;
    }
  }
}

// A decode step's sequences in one batched call (mixed lengths, one past a segment
// boundary, one prefill chunk, one with no tokens): each row exactly what attention()
// gives its sequence alone.
TEST(Attention, BatchEqualsEachSequenceAlone) {
  ThreadPool one(1), three(3);
  for (const KvDtype dtype : {KvDtype::f32, KvDtype::bf16, KvDtype::fp8_e4m3})
  for (const Layout& lay : layouts()) {
    const AttentionShape& s = lay.shape;
    std::mt19937 rng(123);
    const std::pair<int64_t, int64_t> shapes[] = {{0, 1}, {45, 1}, {1100, 1}, {17, 5}, {9, 0}, {300, 1}};
    const int64_t q_stride = s.n_q_heads * s.dk, out_stride = s.n_q_heads * s.dv;
    std::vector<std::unique_ptr<PagedCache>> caches;
    std::vector<std::vector<float>> qs, batched, alone;
    std::vector<AttentionSeq> seqs;
    for (auto [pos0, n_tokens] : shapes) {
      caches.push_back(std::make_unique<PagedCache>(pos0 + std::max<int64_t>(n_tokens, 1), lay.format(dtype), 16, rng,
                                                    uniform_value));
      qs.emplace_back(size_t(std::max<int64_t>(n_tokens, 1) * q_stride));
      for (float& x : qs.back()) x = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
      batched.emplace_back(size_t(std::max<int64_t>(n_tokens, 1) * out_stride), -7.0f);
      alone.push_back(batched.back());
    }
    for (size_t i = 0; i < caches.size(); ++i) {
      seqs.push_back({qs[i].data(), q_stride, shapes[i].second, shapes[i].first, caches[i]->view, batched[i].data(),
                      out_stride});
    }
    attention_batch(s, seqs, three);
    for (size_t i = 0; i < caches.size(); ++i) {
      attention(s, qs[i].data(), q_stride, shapes[i].second, shapes[i].first, caches[i]->view, alone[i].data(),
                out_stride, one);
      EXPECT_EQ(batched[i], alone[i]) << lay.name << " " << kv_dtype_name(dtype) << " sequence " << i;
    }
  }
}

TEST(Attention, SinglePositionReturnsItsValue) {
  const Layout lay = layouts()[2];
  std::mt19937 rng(7);
  ThreadPool pool(2);
  for (const KvDtype dtype : kDtypes) {
    PagedCache cache(1, lay.format(dtype), 1, rng, uniform_value);
    std::vector<float> row(size_t(cache.format.floats()));
    cache.format.decode_ref(cache.table[0], 0, cache.format.floats(), row.data());
    std::vector<float> q(size_t(lay.shape.n_q_heads * lay.shape.dk), 0.3f);
    std::vector<float> out(size_t(lay.shape.n_q_heads * lay.shape.dv));
    attention(lay.shape, q.data(), 0, 1, 0, cache.view, out.data(), 0, pool);
    const int group = lay.shape.n_q_heads / lay.shape.n_kv_heads;
    for (int h = 0; h < lay.shape.n_q_heads; ++h) {
      const float* v = row.data() + lay.shape.v_offset + (h / group) * lay.shape.v_head_stride;
      for (int64_t d = 0; d < lay.shape.dv; ++d)
        EXPECT_FLOAT_EQ(out[size_t(h * lay.shape.dv + d)], v[d]) << kv_dtype_name(dtype);
    }
  }
}

// A head whose key or value would start inside a scaled group cannot be read alone.
TEST(Attention, RejectsHeadsThatSplitAScaledGroup) {
  const Layout lay = layouts()[1];
  std::mt19937 rng(3);
  // gqa-small's 64 floats as one segment: q8_0 blocks [0, 32) and [32, 64), heads of 16.
  PagedCache cache(4, KvRowFormat(KvDtype::q8_0, {64}), 4, rng, uniform_value);
  std::vector<float> q(size_t(lay.shape.n_q_heads * lay.shape.dk), 0.3f), out(size_t(lay.shape.n_q_heads * lay.shape.dv));
  ThreadPool pool(1);
  EXPECT_THROW(attention(lay.shape, q.data(), 0, 1, 3, cache.view, out.data(), 0, pool), Error);
}

TEST(Attention, RejectsBadShapes) {
  AttentionShape s = layouts()[0].shape;
  s.n_kv_heads = 5;  // 32 query heads cannot share 5
  ThreadPool pool(1);
  KvView kv{nullptr, 16, 1, nullptr};
  EXPECT_THROW(attention(s, nullptr, 0, 1, 0, kv, nullptr, 0, pool), Error);
  EXPECT_THROW(attention_ref(s, nullptr, 0, 1, 0, kv, nullptr, 0), Error);
}

std::string self_path() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

TEST(Backends, SlowerPathsPassTheSameTests) {
  // The backend is fixed per process, so the slower paths are checked by running this
  // binary again with MOENGINE_CPU capped: generic always, and AVX2 where AVX-512 runs.
  if (const char* cap = std::getenv("MOENGINE_CPU")) {
    EXPECT_STREQ(attention_backend_name(), cap);
    GTEST_SKIP() << "MOENGINE_CPU=" << cap;
  }
  const std::string best = attention_backend_name();
  if (best == "generic") GTEST_SKIP() << "no faster path on this CPU";
  const std::string exe = self_path();
  ASSERT_FALSE(exe.empty());
  std::vector<std::string> caps = {"generic"};
  if (best == "avx512" || best == "avx512-bf16") caps.push_back("avx2");
  if (best == "avx512-bf16") caps.push_back("avx512");
  for (const std::string& cap : caps) {
    const std::string cmd = "MOENGINE_CPU=" + cap + " '" + exe + "' --gtest_brief=1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cap;
  }
}

}  // namespace
}  // namespace moe
