#pragma once
// Internals shared by the attention backends (attention.cpp, attention_avx512.cpp): the
// tile constants and the table of inner loops a backend provides. Not for use outside
// src/kernels.
#include <cstdint>

namespace moe::attn {

inline constexpr int kMaxTileRows = 64;  // query rows per tile
inline constexpr int kChunk = 32;        // positions per online-softmax step

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
};

// AVX2's softmax step; the AVX-512 backend uses it too (a few percent of the time).
void softmax_avx2(int rows, int np, const int64_t* limit, int64_t p0, float* s, float* m, float* l,
                  float* alpha);
// The AVX-512 backend (F, BW, VL, VNNI: the matmul path's set); only for CPUs that have it.
AttnKernels avx512_kernels();

}  // namespace moe::attn
