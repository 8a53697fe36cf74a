// Public matmul entry points: activation packing, path selection, threading, reference.
#include "kernels/matmul.h"

#include <algorithm>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/matmul_impl.h"
#include "kernels/regrouped.h"
#include "kernels/quant.h"

namespace moe {
namespace {

using mm::ActFormat;

void check_supported(GgmlType t, const char* what) {
  if (!traits(t).supported) fail("{}: tensor type {} is not supported", what, type_name(t));
}

mm::PackQ8Fn pack_fn() {
  static const mm::PackQ8Fn fn =
      matmul_best_path() == MatmulPath::Generic ? mm::generic_pack_q8 : mm::avx2_pack_q8;
  return fn;
}

mm::RowsFn rows_fn(MatmulPath path, GgmlType t);

// A regrouped type on a path without a kernel for it: each group goes back into plain rows
// for that path's kernel of the plain type. Only tests and a MOENGINE_CPU cap below the
// loader's choice get here (the loader regroups for the AVX-512 path only).
template <MatmulPath P>
void ungrouped_rows(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  thread_local std::vector<uint8_t> rows;
  const GgmlType plain = plain_type(w.type);
  rows.resize(size_t(kR16Rows) * row_bytes(plain, w.cols));
  const mm::RowsFn fn = rows_fn(P, plain);
  for (int64_t g = r0 / kR16Rows; g * kR16Rows < r1; ++g) {
    ungroup(w, g, rows.data());
    const int64_t first = g * kR16Rows;
    fn(make_qmatrix(plain, kR16Rows, w.cols, rows.data()), x, y + first, ldy, std::max(r0, first) - first,
       std::min(r1, first + kR16Rows) - first);
  }
}

mm::RowsFn rows_fn(MatmulPath path, GgmlType t) {
  if (is_regrouped(t)) {
    switch (path) {
      case MatmulPath::Avx512: return mm::avx512_rows_regrouped(t);
      case MatmulPath::Avx2: return ungrouped_rows<MatmulPath::Avx2>;
      case MatmulPath::Generic: return ungrouped_rows<MatmulPath::Generic>;
    }
  }
  // The AVX-512 path has its own kernels for some types and runs AVX2's for the others.
  mm::RowsFn fn = path == MatmulPath::Avx512 ? mm::avx512_rows(t) : nullptr;
  if (fn == nullptr && path != MatmulPath::Generic) {
    fn = t == GgmlType::F8_E4M3_B128                 ? mm::avx2_rows_fp8()
         : mm::act_format(t) == ActFormat::Q8x256 ? mm::avx2_rows_kquant(t)
                                                   : mm::avx2_rows(t);
  }
  return fn != nullptr ? fn : mm::generic_rows(t);
}

// Where a type's kernel sits in the table: GGUF ids are all below 32, and the internal
// types (ids far above) take the slots after them. Only supported types get here.
constexpr size_t kGgufSlots = 32;
size_t slot(GgmlType t) {
  const uint32_t id = uint32_t(t);
  return id < kFirstInternalType ? size_t(id) : kGgufSlots + (id - kFirstInternalType);
}

// The kernel per type on the best path, resolved once.
const mm::RowsFn* best_table() {
  static const auto table = [] {
    static mm::RowsFn fns[kGgufSlots + kInternalTypeCount] = {};
    for (uint32_t id = 0; id < kGgufSlots; ++id) {
      const auto tr = ggml_type_traits(id);
      if (tr && tr->supported) fns[slot(tr->type)] = rows_fn(matmul_best_path(), tr->type);
    }
    for (uint32_t id = kFirstInternalType; id < kFirstInternalType + kInternalTypeCount; ++id) {
      fns[slot(GgmlType(id))] = rows_fn(matmul_best_path(), GgmlType(id));
    }
    return fns;
  }();
  return table;
}

void pack_tokens(GgmlType wt, const float* x, int64_t t0, int64_t t1, int64_t cols, int64_t ldx,
                 uint8_t* out, size_t token_bytes) {
  const ActFormat f = mm::act_format(wt);
  const mm::ActLayout l = mm::act_layout(f, cols);
  const mm::PackQ8Fn pack = pack_fn();
  for (int64_t t = t0; t < t1; ++t) {
    uint8_t* dst = out + size_t(t) * token_bytes;
    const float* src = x + t * ldx;
    if (f == ActFormat::F32) {
      std::copy_n(src, cols, reinterpret_cast<float*>(dst));
    } else {
      pack(src, cols, f == ActFormat::Q8x32 ? 32 : 256, dst, l);
    }
  }
}

void check_operands(const QMatrix& w, const PackedActs& x, int64_t row_begin, int64_t row_end) {
  if (!x.fits(w.type)) {
    fail("matmul: activations packed for {} cannot feed {} weights", type_name(x.weight_type()),
         type_name(w.type));
  }
  if (x.cols() != w.cols) fail("matmul: activations have {} columns, weights {}", x.cols(), w.cols);
  if (row_begin < 0 || row_end > w.rows || row_begin > row_end) {
    fail("matmul: row range [{}, {}) outside a matrix of {} rows", row_begin, row_end, w.rows);
  }
}

}  // namespace

void PackedActs::pack(GgmlType weight_type, const float* x, int64_t n_tokens, int64_t cols,
                      int64_t ldx) {
  check_supported(weight_type, "pack activations");
  const int64_t block = traits(weight_type).block_size;
  if (cols <= 0 || cols % block != 0) {
    fail("pack activations: {} columns are not a whole number of {} blocks", cols, type_name(weight_type));
  }
  weight_type_ = weight_type;
  n_tokens_ = n_tokens;
  cols_ = cols;
  token_bytes_ = size_t(mm::act_layout(mm::act_format(weight_type), cols).bytes);
  if (buffer_.size() < token_bytes_ * size_t(n_tokens)) buffer_.resize(token_bytes_ * size_t(n_tokens));
  pack_tokens(weight_type, x, 0, n_tokens, cols, ldx, buffer_.data(), token_bytes_);
}

void PackedActs::pack(GgmlType weight_type, const float* x, int64_t n_tokens, int64_t cols,
                      int64_t ldx, ThreadPool& pool) {
  if (n_tokens < 16 || pool.size() == 1) return pack(weight_type, x, n_tokens, cols, ldx);
  pack(weight_type, x, 0, cols, ldx);  // validates and sets the shape
  n_tokens_ = n_tokens;
  if (buffer_.size() < token_bytes_ * size_t(n_tokens)) buffer_.resize(token_bytes_ * size_t(n_tokens));
  pool.parallel_for(n_tokens, 4, [&](int64_t b, int64_t e) {
    pack_tokens(weight_type, x, b, e, cols, ldx, buffer_.data(), token_bytes_);
  });
}

bool PackedActs::fits(GgmlType w) const {
  return traits(w).supported && mm::act_format(w) == mm::act_format(weight_type_);
}

void matmul_rows(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, int64_t row_begin,
                 int64_t row_end) {
  check_operands(w, x, row_begin, row_end);
  if (row_begin == row_end || x.n_tokens() == 0) return;
  best_table()[slot(w.type)](w, x, y, ldy, row_begin, row_end);
}

void matmul_rows_with(MatmulPath path, const QMatrix& w, const PackedActs& x, float* y, int64_t ldy,
                      int64_t row_begin, int64_t row_end) {
  if (!matmul_path_available(path)) fail("matmul: the {} path is not available on this CPU", matmul_path_name(path));
  check_operands(w, x, row_begin, row_end);
  if (row_begin == row_end || x.n_tokens() == 0) return;
  rows_fn(path, w.type)(w, x, y, ldy, row_begin, row_end);
}

void matmul_packed(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, ThreadPool& pool) {
  check_operands(w, x, 0, w.rows);
  if (w.rows == 0 || x.n_tokens() == 0) return;
  const mm::RowsFn fn = best_table()[slot(w.type)];
  // About eight chunks per thread balance uneven progress; a chunk is a multiple of 16
  // rows so every register tile is full and each thread streams long runs of rows.
  const int64_t per = w.rows / (int64_t(pool.size()) * 8);
  const int64_t grain = std::clamp<int64_t>(mm::round_up(per, 16), 16, 512);
  pool.parallel_for(w.rows, grain, [&](int64_t b, int64_t e) { fn(w, x, y, ldy, b, e); });
}

void matmul(const QMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  thread_local PackedActs packed;
  packed.pack(w.type, x, n_tokens, w.cols, w.cols, pool);
  matmul_packed(w, packed, y, w.rows, pool);
}

void matmul_ref(const QMatrix& w, const float* x, int64_t n_tokens, float* y) {
  check_supported(w.type, "matmul_ref");
  std::vector<float> row(size_t(w.cols));
  const GgmlType plain = plain_type(w.type);
  const size_t plain_row = row_bytes(plain, w.cols);
  std::vector<uint8_t> group(is_regrouped(w.type) ? size_t(kR16Rows) * plain_row : 0);
  for (int64_t r = 0; r < w.rows; ++r) {
    if (is_regrouped(w.type)) {
      if (r % kR16Rows == 0) ungroup(w, r / kR16Rows, group.data());
      dequantize_row(plain, group.data() + size_t(r % kR16Rows) * plain_row, row.data(), w.cols);
    } else {
      dequantize_row(w.type, w.row(r), row.data(), w.cols);
    }
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* xt = x + t * w.cols;
      double acc = 0;
      for (int64_t i = 0; i < w.cols; ++i) acc += double(row[size_t(i)]) * double(xt[i]);
      y[t * w.rows + r] = float(acc);
    }
  }
}

MatmulPath matmul_best_path() {
  if (matmul_path_available(MatmulPath::Avx512)) return MatmulPath::Avx512;
  return matmul_path_available(MatmulPath::Avx2) ? MatmulPath::Avx2 : MatmulPath::Generic;
}

bool matmul_path_available(MatmulPath path) {
  const CpuFeatures& f = cpu_features();
  switch (path) {
    case MatmulPath::Generic: return true;
    case MatmulPath::Avx2: return f.has_avx2_fma();
    case MatmulPath::Avx512: return f.has_avx2_fma() && f.has_avx512() && f.avx512vnni;
  }
  return false;
}

bool matmul_rounds_to_bf16(MatmulPath path, GgmlType t) {
  return t == GgmlType::BF16 && matmul_path_available(path) && rows_fn(path, t) == mm::avx512_rows_bf16();
}

const char* matmul_path_name(MatmulPath path) {
  switch (path) {
    case MatmulPath::Generic: return "generic";
    case MatmulPath::Avx2: return "avx2";
    case MatmulPath::Avx512: return "avx512";
  }
  return "?";
}

const char* matmul_backend_name() { return matmul_path_name(matmul_best_path()); }

}  // namespace moe
