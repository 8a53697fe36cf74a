#pragma once
// Moves a loaded model's weight matrices out of the file's pages into memory the model
// owns, in transparent huge pages where the kernel gives them: a decode step streams every
// weight once, and on 4 KiB file pages it pays a TLB miss per page and hardware
// prefetchers that stop at every page boundary (one-token decode of q4_K_M and bf16 models
// 7-15% faster measured). On the way, q8_0, q4_K, q6_K and q5_0 matrices are regrouped (see
// kernels/regrouped.h) where regroup_here(): the layouts of the AVX-512 kernels that serve
// 16 rows with each vpdpbusd (q8_0 prefill and batched decode about 2.5x faster than on the
// plain rows). The file's pages the weights came from are let go, so the process holds
// them once.
//
// Only where weights_move_here(). An expert-parallel rank does not move the routed experts
// here: ExpertParallel copies the ones the rank holds, once it knows which.
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
  // regroup: whether matrices with a regrouped layout (can_regroup) are regrouped.
  explicit WeightRegrouper(bool regroup) : regroup_(regroup) {}

  // Marks a matrix (or every matrix of a 2-D or 3-D tensor) to be moved; empty ones and
  // ones whose rows lie apart are left where they are. The objects must stay where they
  // are until run().
  void add(QMatrix& m);
  void add(Tensor& t);
  uint64_t bytes() const { return bytes_; }                      // marked in all
  uint64_t regrouped_bytes() const { return regrouped_bytes_; }  // of which to regroup
  // Whether a marked matrix starts at p (the loader need not read such a tensor in first:
  // moving reads it).
  bool starts_at(const void* p) const { return starts_.contains(p); }

  // Moves everything marked into one allocation and points the matrices and tensors at it;
  // returns the allocation (keep it as long as they are used). progress(fraction).
  std::shared_ptr<const void> run(const std::function<void(double)>& progress);

 private:
  struct Item {
    QMatrix source;
    size_t offset;  // in the allocation
    bool regroup;   // else copied as it is
  };
  template <class T>
  struct Target {
    T* object;
    size_t offset;  // of its (first) matrix
    bool regroup;
  };
  std::vector<Item> items_;
  std::unordered_set<const void*> starts_;
  std::vector<Target<QMatrix>> matrices_;
  std::vector<Target<Tensor>> tensors_;
  bool regroup_;
  uint64_t bytes_ = 0;
  uint64_t regrouped_bytes_ = 0;
};

}  // namespace moe
