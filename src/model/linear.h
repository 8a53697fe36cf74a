#pragma once
// Batched projections for the forward passes: several matrix products (for example one per
// attention head) issued as one parallel job so a decode step pays for one pool dispatch,
// not one per matrix.
#include <cstdint>
#include <vector>

#include "kernels/matmul.h"

namespace moe {

class ThreadPool;

struct Projection {
  QMatrix w;
  const float* x;  // f32 [n_tokens, w.cols], rows ldx apart
  int64_t ldx;
  float* y;        // f32 [n_tokens, w.rows], rows ldy apart
  int64_t ldy;
};

class Projector {
 public:
  // Runs every projection over the same n_tokens tokens.
  void run(const std::vector<Projection>& ps, int64_t n_tokens, ThreadPool& pool);
  // One projection: y [n_tokens, w.rows] (rows ldy apart) = x [n_tokens, w.cols] (ldx) W^T.
  void run(const QMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy, int64_t n_tokens,
           ThreadPool& pool);

 private:
  std::vector<PackedActs> packed_;
  std::vector<int32_t> source_;  // the projection whose conversion of the input each one uses
  std::vector<Projection> one_;
};

}  // namespace moe
