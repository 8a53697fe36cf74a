#include "kernels/regrouped.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "core/error.h"
#include "core/huge_pages.h"
#include "kernels/q4_k_r16.h"
#include "kernels/q5_0_r16.h"
#include "kernels/q6_k_r16.h"
#include "kernels/q8_0_r16.h"

namespace moe {

bool regroup_here() { return weights_move_here() && matmul_best_path() == MatmulPath::Avx512; }

bool can_regroup(const QMatrix& m) { return regrouped_type(m.type) != m.type && m.rows > 0 && m.rows % kR16Rows == 0; }

QMatrix regroup(const QMatrix& m, uint8_t* dst) {
  if (!can_regroup(m)) {
    fail("regroup: a {} matrix of {} rows has no layout in groups of 16 rows", type_name(m.type), m.rows);
  }
  switch (m.type) {
    case GgmlType::Q8_0: return regroup_q8_0_r16(m, dst);
    case GgmlType::Q4_K: return regroup_q4_K_r16(m, dst);
    case GgmlType::Q6_K: return regroup_q6_K_r16(m, dst);
    default: return regroup_q5_0_r16(m, dst);
  }
}

QMatrix copy_weights(const QMatrix& m, uint8_t* dst, bool regroup_it) {
  if (regroup_it) return regroup(m, dst);
  std::memcpy(dst, m.data, size_t(m.rows) * m.row_stride);
  return QMatrix{m.type, m.rows, m.cols, dst, m.row_stride};
}

void ungroup(const QMatrix& w, int64_t group, void* rows) {
  switch (w.type) {
    case GgmlType::Q8_0_R16: return ungroup_q8_0_r16(w, group, static_cast<BlockQ8_0*>(rows));
    case GgmlType::Q4_K_R16: return ungroup_q4_K_r16(w, group, static_cast<BlockQ4_K*>(rows));
    case GgmlType::Q6_K_R16: return ungroup_q6_K_r16(w, group, static_cast<BlockQ6_K*>(rows));
    case GgmlType::Q5_0_R16: return ungroup_q5_0_r16(w, group, static_cast<BlockQ5_0*>(rows));
    default: fail("ungroup: {} is not a regrouped type", type_name(w.type));
  }
}

void release_weight_pages(const QMatrix& m) {
  static const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(m.data);
  const uintptr_t begin = (start + page - 1) / page * page;
  const uintptr_t end = (start + size_t(m.rows) * m.row_stride) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_PAGEOUT);
}

}  // namespace moe
