#pragma once
// Regroups a loaded model's q8_0 matrices into q8_0_r16 (see kernels/q8_0_r16.h), the
// layout of the AVX-512 kernel that serves 16 rows with each vpdpbusd (prefill and batched
// decode about 2.5x faster than on the q8_0 rows). The regrouped weights live in memory
// the model owns (transparent huge pages where the kernel gives them, fewer TLB misses
// while decode streams them); the file's pages they came from are let go.
//
// Only where regroup_q8_0_here(). An expert-parallel rank does not regroup the routed
// experts here: ExpertParallel regroups the ones the rank holds, once it knows which.
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_set>
#include <vector>

#include "kernels/matmul.h"
#include "model/weights.h"

namespace moe {

class WeightRegrouper {
 public:
  // Marks a matrix (or every matrix of a 2-D or 3-D tensor) for regrouping; ones that are
  // not q8_0 in whole groups of 16 rows are left as they are. The objects must stay where
  // they are until run().
  void add(QMatrix& m);
  void add(Tensor& t);
  uint64_t bytes() const { return bytes_; }
  // Whether a marked matrix starts at p (the loader need not read such a tensor in first:
  // regrouping reads it).
  bool starts_at(const void* p) const { return starts_.contains(p); }

  // Regroups everything marked into one allocation and points the matrices and tensors at
  // it; returns the allocation (keep it as long as they are used). progress(fraction).
  std::shared_ptr<const void> run(const std::function<void(double)>& progress);

 private:
  struct Item {
    QMatrix source;
    size_t offset;  // in the allocation
  };
  std::vector<Item> items_;
  std::unordered_set<const void*> starts_;
  std::vector<std::pair<QMatrix*, size_t>> matrices_;  // (matrix, offset of its item)
  std::vector<std::pair<Tensor*, size_t>> tensors_;    // (tensor, offset of its first matrix)
  uint64_t bytes_ = 0;
};

}  // namespace moe
