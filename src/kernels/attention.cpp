// Flash-style causal attention over a paged KV cache.
//
// Query rows -- (token, head) pairs -- are grouped into tiles of up to kMaxTileRows, so
// that every cache row fetched from memory serves all of them: with MLA every head shares
// the one latent row, with GQA a group of heads shares one kv head (and a tile takes
// several whole groups when they fit, so each row of the cache is fetched once), and in
// prefill consecutive tokens share the keys they have in common. A tile walks its
// positions in chunks of kChunk with one online-softmax update per chunk (running max,
// running sum, accumulator rescaled when the max grows); inside a chunk the kernels work
// on register blocks of a few rows while the chunk's rows stay in L2.
//
// Long contexts are also split into segments of kSegment positions, processed in
// parallel and merged at the end (flash-decoding), so that a decode step with few tiles
// still uses every thread and reads the cache once. Segment boundaries are fixed
// positions, and a row's arithmetic does not depend on which rows share its tile, so
// every output is bit-identical whatever the thread count or the batch it came in.
#include "kernels/attention.h"

#include <xmmintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/attention_impl.h"
#include "kernels/ops_simd.h"

namespace moe {
namespace {

using attn::AttnKernels;
using attn::kChunk;
using attn::kLaneRows;
using attn::kMaxTileRows;
constexpr int64_t kSegment = 1024;
static_assert(kSegment % kChunk == 0);

// ---- portable path ----

void scores_generic(int rows, int np, const float* const* q, const float* const* k, int64_t dk,
                    float scale, float* s) {
  // Eight interleaved partial sums: the fixed-size inner loop becomes SSE code even on
  // baseline x86-64, which a single running sum would forbid.
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < np; ++j) {
      float part[8] = {};
      int64_t d = 0;
      for (; d + 8 <= dk; d += 8)
        for (int i = 0; i < 8; ++i) part[i] += q[r][d + i] * k[j][d + i];
      for (; d < dk; ++d) part[d % 8] += q[r][d] * k[j][d];
      const float sum =
          ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
      s[r * kChunk + j] = sum * scale;
    }
  }
}

void softmax_generic(int rows, int np, const int64_t* limit, int64_t p0, float* s, float* m,
                     float* l, float* alpha) {
  for (int r = 0; r < rows; ++r) {
    float* sr = s + r * kChunk;
    const int valid = int(std::min<int64_t>(np, limit[r] - p0));
    const float m_new = std::max(m[r], *std::max_element(sr, sr + valid));
    alpha[r] = std::exp(m[r] - m_new);  // 0 on the first chunk, where acc is 0 anyway
    m[r] = m_new;
    float sum = 0.0f;
    for (int j = 0; j < valid; ++j) sum += sr[j] = std::exp(sr[j] - m_new);
    std::fill(sr + valid, sr + np, 0.0f);
    l[r] = l[r] * alpha[r] + sum;
  }
}

void accumulate_generic(int rows, int np, const float* s, const float* alpha, const float* const* v,
                        int64_t dv, float* acc) {
  for (int r = 0; r < rows; ++r) {
    float* a = acc + r * dv;
    for (int64_t d = 0; d < dv; ++d) a[d] *= alpha[r];
    for (int j = 0; j < np; ++j) {
      const float w = s[r * kChunk + j];
      if (w == 0.0f) continue;
      for (int64_t d = 0; d < dv; ++d) a[d] += w * v[j][d];
    }
  }
}

// ---- AVX2 + FMA ----

// RB query rows against NP key rows: RB * NP accumulators, each key load reused RB times
// and each query load NP times. A ragged dk ends with one masked step.
template <int RB, int NP>
MOE_AVX2 inline void dot_tile(const float* const* q, const float* const* k, int64_t dk, float scale,
                              float* s) {
  __m256 acc[RB][NP];
#pragma GCC unroll 4
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) acc[r][j] = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 8 <= dk; d += 8) {
    __m256 kv[NP];
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) kv[j] = _mm256_loadu_ps(k[j] + d);
#pragma GCC unroll 4
    for (int r = 0; r < RB; ++r) {
      const __m256 qv = _mm256_loadu_ps(q[r] + d);
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) acc[r][j] = _mm256_fmadd_ps(qv, kv[j], acc[r][j]);
    }
  }
  if (d < dk) {
    const __m256i m = simd::tail_mask(int(dk - d));
    __m256 kv[NP];
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) kv[j] = _mm256_maskload_ps(k[j] + d, m);
#pragma GCC unroll 4
    for (int r = 0; r < RB; ++r) {
      const __m256 qv = _mm256_maskload_ps(q[r] + d, m);
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) acc[r][j] = _mm256_fmadd_ps(qv, kv[j], acc[r][j]);
    }
  }
  // One reduction for the whole tile; unused slots are zero and do not change the others.
  static_assert(RB * NP <= 8);
  __m256 flat[8];
#pragma GCC unroll 8
  for (int e = 0; e < 8; ++e) flat[e] = e < RB * NP ? acc[e / NP][e % NP] : _mm256_setzero_ps();
  alignas(32) float sums[8];
  _mm256_store_ps(sums, _mm256_mul_ps(simd::hsum8(flat), _mm256_set1_ps(scale)));
#pragma GCC unroll 4
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) s[r * kChunk + j] = sums[r * NP + j];
}

template <int NP>
MOE_AVX2 void dot_rows(int rb, const float* const* q, const float* const* k, int64_t dk,
                       float scale, float* s) {
  if constexpr (NP == 4) {  // only ever asked for 1 or 2 rows
    if (rb == 1) return dot_tile<1, 4>(q, k, dk, scale, s);
    return dot_tile<2, 4>(q, k, dk, scale, s);
  } else {
    switch (rb) {
      case 1:
        return dot_tile<1, NP>(q, k, dk, scale, s);
      case 2:
        return dot_tile<2, NP>(q, k, dk, scale, s);
      case 3:
        return dot_tile<3, NP>(q, k, dk, scale, s);
      default:
        return dot_tile<4, NP>(q, k, dk, scale, s);
    }
  }
}

MOE_AVX2 void scores_avx2(int rows, int np, const float* const* q, const float* const* k,
                          int64_t dk, float scale, float* s) {
  // Blocks of up to 4 rows keep RB * NP <= 8 accumulators plus the operands in the 16 ymm
  // registers. A block's queries stay in L1 while the chunk's keys stream from L2.
  if (rows <= 2) {
    int j = 0;
    for (; j + 4 <= np; j += 4) dot_rows<4>(rows, q, k + j, dk, scale, s + j);
    for (; j < np; ++j) dot_rows<1>(rows, q, k + j, dk, scale, s + j);
    return;
  }
  const int n_blocks = (rows + 3) / 4;  // balanced, so every block has 2 to 4 rows
  for (int b = 0; b < n_blocks; ++b) {
    const int r0 = b * rows / n_blocks, rb = (b + 1) * rows / n_blocks - r0;
    float* sb = s + r0 * kChunk;
    int j = 0;
    for (; j + 2 <= np; j += 2) dot_rows<2>(rb, q + r0, k + j, dk, scale, sb + j);
    for (; j < np; ++j) dot_rows<1>(rb, q + r0, k + j, dk, scale, sb + j);
  }
}

}  // namespace

MOE_AVX2 void attn::softmax_avx2(int rows, int np, const int64_t* limit, int64_t p0, float* s, float* m,
                                 float* l, float* alpha) {
  // Rows hold kChunk (a multiple of 8) scores, so whole vectors can be read past np; the
  // lanes past n_valid are masked to -inf for the max and to exactly 0 after exp.
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  float m_new[kMaxTileRows];
  for (int r = 0; r < rows; ++r) {
    const float* sr = s + r * kChunk;
    const int valid = int(std::min<int64_t>(np, limit[r] - p0));
    __m256 vmax = neg_inf;
    for (int j = 0; j < valid; j += 8) {
      const __m256 in = _mm256_castsi256_ps(simd::tail_mask(valid - j));
      vmax = _mm256_max_ps(vmax, _mm256_blendv_ps(neg_inf, _mm256_loadu_ps(sr + j), in));
    }
    m_new[r] = std::max(m[r], simd::hmax(vmax));
  }
  for (int r = 0; r < rows; r += 8) {
    const __m256i mask = simd::tail_mask(rows - r);
    const __m256 mn = _mm256_maskload_ps(m_new + r, mask);
    const __m256 a = simd::exp(_mm256_sub_ps(_mm256_maskload_ps(m + r, mask), mn));
    _mm256_maskstore_ps(alpha + r, mask, a);
    _mm256_maskstore_ps(m + r, mask, mn);
  }
  for (int r = 0; r < rows; ++r) {
    float* sr = s + r * kChunk;
    const int valid = int(std::min<int64_t>(np, limit[r] - p0));
    const __m256 vm = _mm256_set1_ps(m[r]);
    __m256 sum = _mm256_setzero_ps();
    for (int j = 0; j < np; j += 8) {
      const __m256 in = _mm256_castsi256_ps(simd::tail_mask(valid - j));
      const __m256 e = _mm256_and_ps(simd::exp(_mm256_sub_ps(_mm256_loadu_ps(sr + j), vm)), in);
      _mm256_storeu_ps(sr + j, e);
      sum = _mm256_add_ps(sum, e);
    }
    l[r] = l[r] * alpha[r] + simd::hsum(sum);
  }
}

namespace {

// R rows, W vectors of 8 value dims per row at offset d: R * W accumulators stay in
// registers across the whole chunk; each value load is reused by R rows.
template <int R, int W, bool kMasked>
MOE_AVX2 inline void acc_tile(int np, const float* s, const float* alpha, const float* const* v,
                              int64_t dv, int64_t d, __m256i mask, float* acc) {
  __m256 a[R][W];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const __m256 al = _mm256_set1_ps(alpha[r]);
#pragma GCC unroll 2
    for (int w = 0; w < W; ++w) {
      const float* p = acc + r * dv + d + 8 * w;
      a[r][w] = _mm256_mul_ps(kMasked ? _mm256_maskload_ps(p, mask) : _mm256_loadu_ps(p), al);
    }
  }
  for (int j = 0; j < np; ++j) {
    __m256 vv[W];
#pragma GCC unroll 2
    for (int w = 0; w < W; ++w) {
      const float* p = v[j] + d + 8 * w;
      vv[w] = kMasked ? _mm256_maskload_ps(p, mask) : _mm256_loadu_ps(p);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 sw = _mm256_broadcast_ss(s + r * kChunk + j);
#pragma GCC unroll 2
      for (int w = 0; w < W; ++w) a[r][w] = _mm256_fmadd_ps(sw, vv[w], a[r][w]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int w = 0; w < W; ++w) {
      float* p = acc + r * dv + d + 8 * w;
      if (kMasked)
        _mm256_maskstore_ps(p, mask, a[r][w]);
      else
        _mm256_storeu_ps(p, a[r][w]);
    }
}

template <int R>
MOE_AVX2 void accumulate_rows(int np, const float* s, const float* alpha, const float* const* v,
                              int64_t dv, float* acc) {
  const __m256i all = _mm256_set1_epi32(-1);
  int64_t d = 0;
  for (; d + 16 <= dv; d += 16) acc_tile<R, 2, false>(np, s, alpha, v, dv, d, all, acc);
  for (; d + 8 <= dv; d += 8) acc_tile<R, 1, false>(np, s, alpha, v, dv, d, all, acc);
  if (d < dv) acc_tile<R, 1, true>(np, s, alpha, v, dv, d, simd::tail_mask(int(dv - d)), acc);
}

MOE_AVX2 void accumulate_avx2(int rows, int np, const float* s, const float* alpha,
                              const float* const* v, int64_t dv, float* acc) {
  // Blocks of 4 rows by 16 dims: 8 accumulators, 2 value loads and 4 broadcasts per 8 FMAs.
  for (int r0 = 0; r0 < rows; r0 += 4) {
    const float* sb = s + r0 * kChunk;
    float* ab = acc + r0 * dv;
    switch (std::min(4, rows - r0)) {
      case 1:
        accumulate_rows<1>(np, sb, alpha + r0, v, dv, ab);
        break;
      case 2:
        accumulate_rows<2>(np, sb, alpha + r0, v, dv, ab);
        break;
      case 3:
        accumulate_rows<3>(np, sb, alpha + r0, v, dv, ab);
        break;
      default:
        accumulate_rows<4>(np, sb, alpha + r0, v, dv, ab);
        break;
    }
  }
}

const AttnKernels& kernels() {
  static const AttnKernels chosen = [] {
    const CpuFeatures& f = cpu_features();
    if (f.has_avx2_fma() && f.has_avx512() && f.avx512vnni && f.avx512bf16) {
      static const attn::Bf16Kernels bf16 = attn::avx512_bf16_kernels();
      AttnKernels k = attn::avx512_kernels();
      k.bf16 = &bf16;
      k.name = "avx512-bf16";
      return k;
    }
    if (f.has_avx2_fma() && f.has_avx512() && f.avx512vnni) return attn::avx512_kernels();
    if (f.has_avx2_fma()) return AttnKernels{scores_avx2, attn::softmax_avx2, accumulate_avx2, "avx2"};
    return AttnKernels{scores_generic, softmax_generic, accumulate_generic, "generic"};
  }();
  return chosen;
}

// ---- driver ----

void check_format(const AttentionShape& s, const KvView& kv) {
  if (kv.format == nullptr) fail("attention: the KV view has no row format");
  for (int g = 0; g < s.n_kv_heads; ++g) {
    const int64_t k0 = s.k_offset + g * s.k_head_stride, v0 = s.v_offset + g * s.v_head_stride;
    if (!kv.format->whole_groups(k0, s.dk) || !kv.format->whole_groups(v0, s.dv)) {
      fail("attention: kv head {} (key at {}, value at {}) does not fall on whole {} groups of the row", g, k0, v0,
           kv_dtype_name(kv.format->dtype()));
    }
  }
}

int64_t segments_for(int64_t n_positions) { return (n_positions + kSegment - 1) / kSegment; }

// The rows of kv heads [g_begin, g_end), each head contributing its rows
// [row_begin, row_end). A head's rows are numbered token * group + head_in_group, so a
// row's limit (how many positions it attends to) never decreases along the range. Either
// the tile holds whole heads or a slice of one head's rows.
struct Tile {
  int g_begin, g_end;
  int64_t row_begin, row_end;
  int64_t n_segments;   // that its last, longest rows span
  int64_t part_offset;  // floats into the partial results, when some row spans several
  int64_t rows_per_head() const { return row_end - row_begin; }
  int64_t size() const { return (g_end - g_begin) * rows_per_head(); }
};

struct Call {
  const AttnKernels& kern;
  const AttentionShape& sh;
  int group;
  const float* q;
  int64_t q_stride;
  int64_t pos0;
  const KvView& kv;
  float* out;
  int64_t out_stride;
  float* parts;  // per (tile, segment, row): running max, running sum, dv accumulators

  int64_t limit(int64_t row) const { return pos0 + row / group + 1; }
  int head(int g, int64_t row) const { return g * group + int(row % group); }
  const float* query(int g, int64_t row) const {
    return q + (row / group) * q_stride + head(g, row) * sh.dk;
  }
  float* output(int g, int64_t row) const {
    return out + (row / group) * out_stride + head(g, row) * sh.dv;
  }
  float* partial(const Tile& t, int64_t seg, int g, int64_t row) const {
    const int64_t local = (g - t.g_begin) * t.rows_per_head() + (row - t.row_begin);
    return parts + t.part_offset + (seg * t.size() + local) * (sh.dv + 2);
  }
};

// Bytes [lo, hi) of the cache rows of positions [p, p + n), towards L2.
void prefetch_rows(const KvView& kv, int64_t p, int64_t n, int64_t lo, int64_t hi) {
  int64_t block = p / kv.block_size, in_block = p % kv.block_size;
  for (int64_t j = 0; j < n; ++j) {
    const char* row = reinterpret_cast<const char*>(kv.blocks[block] + in_block * kv.row_stride);
    for (int64_t byte = lo; byte < hi; byte += 64) _mm_prefetch(row + byte, _MM_HINT_T1);
    if (++in_block == kv.block_size) {
      in_block = 0;
      ++block;
    }
  }
}

// One segment of one tile: online softmax over its chunks, then the normalised output
// (a row that lies within one segment) or the unnormalised partial (one that spans more).
// Each chunk of cache rows is fetched once and used by every kv head of the tile.
void run_segment(const Call& c, const Tile& tile, int64_t seg, float* acc) {
  const AttentionShape& sh = c.sh;
  const int64_t seg_begin = seg * kSegment;
  const int64_t seg_end = std::min(seg_begin + kSegment, c.limit(tile.row_end - 1));
  int64_t first = tile.row_begin;  // rows ending before this segment take no part
  while (c.limit(first) <= seg_begin) ++first;
  const int n = int(tile.row_end - first);  // rows per head
  const int n_heads = tile.g_end - tile.g_begin;

  // Per-row state, head after head: row r of head h is at index h * n + r.
  const float* qr[kMaxTileRows];
  int64_t limit[kMaxTileRows];
  float m[kMaxTileRows], l[kMaxTileRows], alpha[kMaxTileRows];
  for (int h = 0; h < n_heads; ++h) {
    for (int r = 0; r < n; ++r) {
      qr[h * n + r] = c.query(tile.g_begin + h, first + r);
      limit[h * n + r] = c.limit(first + r);
      m[h * n + r] = -std::numeric_limits<float>::infinity();
      l[h * n + r] = 0.0f;
    }
  }
  std::fill(acc, acc + n_heads * n * sh.dv, 0.0f);
  // Many query heads per kv head: their scores with the rows in the vector lanes, on the
  // queries transposed once per segment. Chosen by the model's shape, never by how many
  // rows a call has, so a row's arithmetic is the same in prefill, decode and any batch.
  const bool lanes = c.kern.scores_lanes != nullptr && c.group >= attn::kLanesMinGroup;
  const int64_t lane_stride = (n + kLaneRows - 1) / kLaneRows * kLaneRows * sh.dk;  // floats per head
  // A bf16 cache on a CPU with bf16 dot products: keys and values read as stored.
  const KvRowFormat& fmt = *c.kv.format;
  const bool bf16_dot = c.kern.bf16 != nullptr && fmt.dtype() == KvDtype::bf16 && sh.dk % 2 == 0;
  thread_local std::vector<float> qt;
  thread_local std::vector<uint32_t> qt16;
  thread_local std::vector<uint16_t> qb16;
  const uint16_t* qr16[kMaxTileRows];
  if (bf16_dot && lanes) {
    qt16.resize(size_t(n_heads * lane_stride / 2));
    for (int h = 0; h < n_heads; ++h) c.kern.bf16->transpose_queries(n, qr + h * n, sh.dk, qt16.data() + h * lane_stride / 2);
  } else if (bf16_dot) {
    qb16.resize(size_t(n_heads * n * sh.dk));
    c.kern.bf16->convert_queries(n_heads * n, qr, sh.dk, qb16.data());
    for (int i = 0; i < n_heads * n; ++i) qr16[i] = qb16.data() + i * sh.dk;
  } else if (lanes) {
    qt.resize(size_t(n_heads * lane_stride));
    for (int h = 0; h < n_heads; ++h) c.kern.transpose_queries(n, qr + h * n, sh.dk, qt.data() + h * lane_stride);
  }
  float s[kMaxTileRows * kChunk];
  const uint8_t* base[kChunk];
  const float* kp[kChunk];
  const float* vp[kChunk];

  // Rows stored below f32 are converted a chunk at a time, each head's key and value
  // apart, into buffers that stay in L1/L2 while the chunk is worked on.
  const bool direct = fmt.dtype() == KvDtype::f32 || bf16_dot;
  const uint16_t* k16[kChunk];
  const uint16_t* v16[kChunk];
  thread_local std::vector<float> kbuf, vbuf;
  if (!direct) {
    kbuf.resize(size_t(kChunk * sh.dk));
    vbuf.resize(size_t(kChunk * sh.dv));
  }
  int64_t span_lo = INT64_MAX, span_hi = 0;  // bytes of a cache row this tile reads
  for (int g = tile.g_begin; g < tile.g_end; ++g) {
    const int64_t k0 = sh.k_offset + g * sh.k_head_stride, v0 = sh.v_offset + g * sh.v_head_stride;
    span_lo = std::min({span_lo, fmt.byte_at(k0), fmt.byte_at(v0)});
    span_hi = std::max({span_hi, fmt.byte_at(k0 + sh.dk), fmt.byte_at(v0 + sh.dv)});
  }
  int active = 0;  // rows [active, n) of every head still attend to the current chunk
  for (int64_t p0 = seg_begin; p0 < seg_end; p0 += kChunk) {
    const int np = int(std::min<int64_t>(kChunk, seg_end - p0));
    while (limit[active] <= p0) ++active;
    int64_t block = p0 / c.kv.block_size, in_block = p0 % c.kv.block_size;
    for (int j = 0; j < np; ++j) {
      base[j] = c.kv.blocks[block] + in_block * c.kv.row_stride;
      if (++in_block == c.kv.block_size) {
        in_block = 0;
        ++block;
      }
    }
    // The next chunk's rows are requested now, so this chunk's arithmetic hides their
    // latency; the hardware prefetcher alone loses track at block boundaries and strides.
    prefetch_rows(c.kv, p0 + kChunk, std::min<int64_t>(kChunk, seg_end - p0 - kChunk), span_lo,
                  span_hi);
    for (int h = 0; h < n_heads; ++h) {
      const int g = tile.g_begin + h;
      const int64_t k_off = sh.k_offset + g * sh.k_head_stride;
      const int64_t v_off = sh.v_offset + g * sh.v_head_stride;
      const int r0 = h * n + active, rows = n - active;
      if (bf16_dot) {
        const int64_t k_byte = fmt.byte_at(k_off), v_byte = fmt.byte_at(v_off);
        for (int j = 0; j < np; ++j) {
          k16[j] = reinterpret_cast<const uint16_t*>(base[j] + k_byte);
          v16[j] = reinterpret_cast<const uint16_t*>(base[j] + v_byte);
        }
        if (lanes) {
          const int g0 = active / kLaneRows * kLaneRows;
          c.kern.bf16->scores_lanes(n - g0, np, qt16.data() + h * lane_stride / 2 + g0 * sh.dk / 2, k16, sh.dk, sh.scale,
                                    s + (h * n + g0) * kChunk);
        } else {
          c.kern.bf16->scores(rows, np, qr16 + r0, k16, sh.dk, sh.scale, s + r0 * kChunk);
        }
        c.kern.softmax(rows, np, limit + r0, p0, s + r0 * kChunk, m + r0, l + r0, alpha + r0);
        c.kern.bf16->accumulate(rows, np, s + r0 * kChunk, alpha + r0, v16, sh.dv, acc + r0 * sh.dv);
        continue;
      }
      if (direct) {
        for (int j = 0; j < np; ++j) {
          kp[j] = reinterpret_cast<const float*>(base[j]) + k_off;
          vp[j] = reinterpret_cast<const float*>(base[j]) + v_off;
        }
      } else {
        // MLA's value is the start of its key: converted once, for both.
        const bool v_in_k = v_off >= k_off && v_off + sh.dv <= k_off + sh.dk;
        for (int j = 0; j < np; ++j) {
          float* k = kbuf.data() + j * sh.dk;
          fmt.decode(base[j], k_off, sh.dk, k);
          kp[j] = k;
          if (v_in_k) {
            vp[j] = k + (v_off - k_off);
          } else {
            float* v = vbuf.data() + j * sh.dv;
            fmt.decode(base[j], v_off, sh.dv, v);
            vp[j] = v;
          }
        }
      }
      if (lanes) {
        const int g0 = active / kLaneRows * kLaneRows;  // the lane group holding the first active row
        c.kern.scores_lanes(n - g0, np, qt.data() + h * lane_stride + g0 * sh.dk, kp, sh.dk, sh.scale,
                            s + (h * n + g0) * kChunk);
      } else {
        c.kern.scores(rows, np, qr + r0, kp, sh.dk, sh.scale, s + r0 * kChunk);
      }
      c.kern.softmax(rows, np, limit + r0, p0, s + r0 * kChunk, m + r0, l + r0, alpha + r0);
      c.kern.accumulate(rows, np, s + r0 * kChunk, alpha + r0, vp, sh.dv, acc + r0 * sh.dv);
    }
  }

  for (int h = 0; h < n_heads; ++h) {
    for (int r = 0; r < n; ++r) {
      const int i = h * n + r;
      const float* a = acc + i * sh.dv;
      if (segments_for(limit[i]) == 1) {
        float* o = c.output(tile.g_begin + h, first + r);
        const float inv = 1.0f / l[i];
        for (int64_t d = 0; d < sh.dv; ++d) o[d] = a[d] * inv;
      } else {
        float* p = c.partial(tile, seg, tile.g_begin + h, first + r);
        p[0] = m[i];
        p[1] = l[i];
        std::copy(a, a + sh.dv, p + 2);
      }
    }
  }
}

// Combines the segments of every row that spans several, always in segment order.
void merge_tile(const Call& c, const Tile& tile) {
  const int64_t dv = c.sh.dv;
  for (int g = tile.g_begin; g < tile.g_end; ++g) {
    for (int64_t row = tile.row_begin; row < tile.row_end; ++row) {
      const int64_t n_seg = segments_for(c.limit(row));
      if (n_seg == 1) continue;
      float max = -std::numeric_limits<float>::infinity();
      for (int64_t sg = 0; sg < n_seg; ++sg) max = std::max(max, c.partial(tile, sg, g, row)[0]);
      float sum = 0.0f;
      for (int64_t sg = 0; sg < n_seg; ++sg) {
        const float* p = c.partial(tile, sg, g, row);
        sum += std::exp(p[0] - max) * p[1];
      }
      float* o = c.output(g, row);
      std::fill(o, o + dv, 0.0f);
      for (int64_t sg = 0; sg < n_seg; ++sg) {
        const float* p = c.partial(tile, sg, g, row);
        const float w = std::exp(p[0] - max) / sum;
        for (int64_t d = 0; d < dv; ++d) o[d] += w * p[2 + d];
      }
    }
  }
}

// Tiles of at most tile_rows rows: whole kv heads together while they fit, else slices of
// one head's rows.
std::vector<Tile> plan_tiles(const Call& c, int n_kv_heads, int64_t rows_per_head,
                             int64_t tile_rows) {
  std::vector<Tile> tiles;
  if (rows_per_head <= tile_rows) {
    const int heads = int(tile_rows / rows_per_head);
    for (int g = 0; g < n_kv_heads; g += heads)
      tiles.push_back(Tile{g, std::min(g + heads, n_kv_heads), 0, rows_per_head, 0, 0});
  } else {
    const int64_t per_head = (rows_per_head + tile_rows - 1) / tile_rows;
    for (int g = 0; g < n_kv_heads; ++g)
      for (int64_t t = 0; t < per_head; ++t)
        tiles.push_back(
            Tile{g, g + 1, t * rows_per_head / per_head, (t + 1) * rows_per_head / per_head, 0, 0});
  }
  int64_t offset = 0;
  for (Tile& t : tiles) {
    t.n_segments = segments_for(c.limit(t.row_end - 1));
    t.part_offset = offset;
    if (t.n_segments > 1) offset += t.n_segments * t.size() * (c.sh.dv + 2);
  }
  return tiles;
}

}  // namespace

void attention(const AttentionShape& s, const float* q, int64_t q_stride, int64_t n_tokens,
               int64_t pos0, const KvView& kv, float* out, int64_t out_stride, ThreadPool& pool) {
  const AttentionSeq seq{q, q_stride, n_tokens, pos0, kv, out, out_stride};
  attention_batch(s, {&seq, 1}, pool);
}

void attention_batch(const AttentionShape& s, std::span<const AttentionSeq> seqs, ThreadPool& pool) {
  if (s.n_q_heads <= 0 || s.n_kv_heads <= 0 || s.n_q_heads % s.n_kv_heads != 0) {
    fail("attention: {} query heads cannot share {} kv heads", s.n_q_heads, s.n_kv_heads);
  }
  if (s.dk <= 0 || s.dv <= 0) fail("attention: bad shape dk={} dv={}", s.dk, s.dv);
  for (const AttentionSeq& q : seqs) check_format(s, q.kv);
  const int group = s.n_q_heads / s.n_kv_heads;
  std::vector<Call> calls;
  std::vector<int64_t> rows_per_head;
  for (const AttentionSeq& q : seqs) {
    if (q.kv.block_size <= 0 || q.pos0 < 0) {
      fail("attention: bad sequence block_size={} pos0={}", q.kv.block_size, q.pos0);
    }
    if (q.n_tokens <= 0) continue;
    calls.push_back(Call{kernels(), s, group, q.q, q.q_stride, q.pos0, q.kv, q.out, q.out_stride, nullptr});
    rows_per_head.push_back(q.n_tokens * group);
  }
  if (calls.empty()) return;

  // Tall tiles read the cache fewer times; they are shortened only while there would be
  // fewer jobs than threads. Tile shape never changes a row's result.
  struct Job {
    int32_t call, tile, segment;
  };
  std::vector<std::vector<Tile>> tiles(calls.size());
  std::vector<Job> jobs;
  for (int64_t tile_rows = kMaxTileRows;; tile_rows = (tile_rows + 1) / 2) {
    jobs.clear();
    for (size_t c = 0; c < calls.size(); ++c) {
      tiles[c] = plan_tiles(calls[c], s.n_kv_heads, rows_per_head[c], tile_rows);
      for (size_t t = 0; t < tiles[c].size(); ++t)
        for (int64_t sg = 0; sg < tiles[c][t].n_segments; ++sg) jobs.push_back({int32_t(c), int32_t(t), int32_t(sg)});
    }
    if (tile_rows == 1 || int64_t(jobs.size()) >= pool.size()) break;
  }
  // Partial results of the rows that span several segments, each call's after the last's.
  std::vector<int64_t> part_at(calls.size() + 1, 0);
  for (size_t c = 0; c < calls.size(); ++c) {
    const Tile& last = tiles[c].back();
    part_at[c + 1] = part_at[c] + last.part_offset +
                     (last.n_segments > 1 ? last.n_segments * last.size() * (s.dv + 2) : 0);
  }
  std::unique_ptr<float[]> parts(part_at.back() > 0 ? new float[size_t(part_at.back())] : nullptr);
  for (size_t c = 0; c < calls.size(); ++c) calls[c].parts = parts.get() + part_at[c];

  // Jobs are handed out like parallel_for does, but through join() so that each thread
  // allocates its accumulators once rather than once per job.
  std::atomic<int64_t> next{0};
  const int64_t n_jobs = int64_t(jobs.size());
  pool.join([&] {
    std::vector<float> acc;
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n_jobs;) {
      const Job& job = jobs[size_t(i)];
      const Tile& tile = tiles[size_t(job.call)][size_t(job.tile)];
      acc.resize(size_t(tile.size() * s.dv));
      run_segment(calls[size_t(job.call)], tile, job.segment, acc.data());
    }
  });
  std::vector<std::pair<int32_t, int32_t>> merges;  // (call, tile) with rows to merge
  for (size_t c = 0; c < calls.size(); ++c) {
    for (size_t t = 0; t < tiles[c].size(); ++t)
      if (tiles[c][t].n_segments > 1) merges.emplace_back(int32_t(c), int32_t(t));
  }
  if (!merges.empty()) {
    pool.parallel_for(int64_t(merges.size()), 1, [&](int64_t b, int64_t e) {
      for (int64_t m = b; m < e; ++m) {
        const auto [c, t] = merges[size_t(m)];
        merge_tile(calls[size_t(c)], tiles[size_t(c)][size_t(t)]);
      }
    });
  }
}

const char* attention_backend_name() { return kernels().name; }

}  // namespace moe
