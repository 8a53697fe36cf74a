#pragma once
// Internals shared by the attention backends (attention.cpp, attention_avx512.cpp): the
// tile constants and the table of inner loops a backend provides. Not for use outside
// src/kernels.
#include <cstdint>

namespace moe::attn {

inline constexpr int kMaxTileRows = 64;  // query rows per tile
inline constexpr int kChunk = 32;        // positions per online-softmax step
inline constexpr int kLaneRows = 16;     // query rows per vector in scores_lanes
// Query heads per kv head from which a backend's scores_lanes serves the scores: with
// fewer, a decode step's rows would leave lanes empty.
inline constexpr int kLanesMinGroup = 16;

// The loops of the bf16 path (attention_avx512_bf16.cpp): a bf16 cache read as stored; dk
// must be even. For the lanes kernels, transpose_queries lays rows out in bf16 pairs of
// dims, qt[(g * dk / 2 + p) * kLaneRows + i] = (q[g * kLaneRows + i][2p], ...[2p + 1]);
// otherwise convert_queries writes each row as dk bf16 (out[r * dk + d]) for scores.
struct Bf16Kernels {
  void (*transpose_queries)(int rows, const float* const* q, int64_t dk, uint32_t* qt);
  void (*scores_lanes)(int rows, int np, const uint32_t* qt, const uint16_t* const* k, int64_t dk, float scale, float* s);
  void (*convert_queries)(int rows, const float* const* q, int64_t dk, uint16_t* out);
  void (*scores)(int rows, int np, const uint16_t* const* q, const uint16_t* const* k, int64_t dk, float scale, float* s);
  void (*accumulate)(int rows, int np, const float* s, const float* alpha, const uint16_t* const* v, int64_t dv, float* acc);
};

// The three inner loops, per backend. Scores are laid out s[row * kChunk + position].
struct AttnKernels {
  // s[r][j] = scale * q[r] . k[j] for r < rows, j < np.
  void (*scores)(int rows, int np, const float* const* q, const float* const* k, int64_t dk,
                 float scale, float* s);
  // The online-softmax step of a chunk for each row r: the first n_valid = min(np,
  // limit[r] - p0) >= 1 scores are valid. Raises the running max m[r], sets
  // alpha[r] = exp(old max - new max), replaces the scores by exp(s - new max) (0 past
  // n_valid) and updates the running sum l[r] = alpha[r] l[r] + sum of those.
  void (*softmax)(int rows, int np, const int64_t* limit, int64_t p0, float* s, float* m, float* l,
                  float* alpha);
  // acc[r] = alpha[r] acc[r] + sum_j s[r][j] v[j]; acc rows are dv floats apart.
  void (*accumulate)(int rows, int np, const float* s, const float* alpha, const float* const* v,
                     int64_t dv, float* acc);
  const char* name;
  // Optional (null where the backend has none), for kv heads shared by many query heads
  // (MLA's one latent row, wide GQA groups): scores with kLaneRows rows in the vector
  // lanes, so each key element is loaded once for all of them and no sum is folded across
  // lanes. transpose_queries lays the rows out as qt[(g * dk + d) * kLaneRows + i] =
  // q[g * kLaneRows + i][d] (zero past rows); scores_lanes then fills s as scores() does.
  // A row's result depends only on its own query, whatever the rows beside it.
  void (*transpose_queries)(int rows, const float* const* q, int64_t dk, float* qt) = nullptr;
  void (*scores_lanes)(int rows, int np, const float* qt, const float* const* k, int64_t dk, float scale,
                       float* s) = nullptr;
  // Optional: the bf16 path, where the CPU has AVX512_BF16.
  const Bf16Kernels* bf16 = nullptr;
};

// AVX2's softmax step; the AVX-512 backend uses it too (a few percent of the time).
void softmax_avx2(int rows, int np, const int64_t* limit, int64_t p0, float* s, float* m, float* l,
                  float* alpha);
// The AVX-512 backend (F, BW, VL, VNNI: the matmul path's set); only for CPUs that have it.
AttnKernels avx512_kernels();
// AVX512_BF16's dot products on bf16 rows; only for CPUs that have them.
Bf16Kernels avx512_bf16_kernels();

}  // namespace moe::attn
