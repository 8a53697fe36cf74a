#pragma once
// Matrix products with weights in any supported GGUF type: y = W x for a batch of tokens.
// Decode (1 token) is a GEMV bound by memory bandwidth; prefill (many tokens) is a GEMM
// that reuses each weight block across tokens. The implementation is chosen once at run
// time from the CPU features; matmul_ref is the plain reference every path is tested
// against.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

#include "kernels/ggml_type.h"

namespace moe {

class ThreadPool;

namespace detail {
// 64-byte aligned storage, so activation blocks start on cache lines and the SIMD loads of
// the packed activations never split one.
template <typename T>
struct CacheAlignedAllocator {
  using value_type = T;
  CacheAlignedAllocator() = default;
  template <typename U>
  CacheAlignedAllocator(const CacheAlignedAllocator<U>&) {}
  T* allocate(size_t n) {
    void* p = std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  template <typename U>
  bool operator==(const CacheAlignedAllocator<U>&) const { return true; }
};
}  // namespace detail

// A 2-D weight: `rows` output features, each a row of `cols` input features stored as
// row_bytes(type, cols) bytes, rows `row_stride` bytes apart (an expert's slice of a 3-D
// tensor is a QMatrix too).
struct QMatrix {
  GgmlType type = GgmlType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
  size_t row_stride = 0;
  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + r * row_stride; }
};

// Activations converted once into the form the dot product for a weight type consumes
// (for example q8_0 blocks for q4_0/q5_0/q4_1/q5_1/q8_0 weights, q8_K blocks for k-quants), so that
// converting is not repeated for every row. Reused across calls to avoid allocation.
//
// Per token (token_bytes apart, 64-byte aligned), by weight type:
//   f32, f16, bf16:        f32 [cols] (the weights are widened, the activations kept exact)
//   q8_0, q4_0, q5_0,
//   q4_1, q5_1:            int8 qs [cols] | f32 d [cols/32] | int32 sum(qs) [cols/32]
//   q4_K, q5_K, q6_K:      int8 qs [cols] | f32 d [cols/256] | int16 sums of 16 qs [cols/16]
// Each 32 (resp. 256) values share one scale d = max|x| / 127 and are coded as
// q = round-to-nearest-even(x * 127 / max|x|). See docs/kernels.md.
// Packing gives the same bytes on every code path.
class PackedActs {
 public:
  // x: f32 [n_tokens, cols], rows ldx floats apart. cols must be a multiple of the weight
  // type's block size. Thread-safe for distinct PackedActs objects.
  void pack(GgmlType weight_type, const float* x, int64_t n_tokens, int64_t cols, int64_t ldx);
  // Same, splitting the tokens over the pool (worth it from a few dozen tokens on).
  void pack(GgmlType weight_type, const float* x, int64_t n_tokens, int64_t cols, int64_t ldx,
            ThreadPool& pool);
  // Whether these activations can feed weights of type w (q8_0/q4_0/q5_0/q4_1/q5_1 share a format,
  // and so do the k-quants and the float types).
  bool fits(GgmlType w) const;
  size_t token_bytes() const { return token_bytes_; }
  GgmlType weight_type() const { return weight_type_; }
  int64_t n_tokens() const { return n_tokens_; }
  int64_t cols() const { return cols_; }
  const uint8_t* token(int64_t t) const { return buffer_.data() + t * token_bytes_; }

 private:
  GgmlType weight_type_ = GgmlType::F32;
  int64_t n_tokens_ = 0;
  int64_t cols_ = 0;
  size_t token_bytes_ = 0;
  std::vector<uint8_t, detail::CacheAlignedAllocator<uint8_t>> buffer_;
};

// y[t * ldy + r] = dot(W row r, x token t) for r in [row_begin, row_end) and every packed
// token. Single-threaded: callers split rows (or experts) over the pool themselves. With
// one token the rows are streamed in order and prefetched ahead within the range only, so
// hand each thread runs of 16 or more contiguous rows rather than interleaved rows.
void matmul_rows(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, int64_t row_begin,
                 int64_t row_end);

// y: f32 [n_tokens, w.rows] = x: f32 [n_tokens, w.cols] times W^T, over the pool.
void matmul(const QMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

// Reference: dequantize each row with dequantize_row and accumulate in double.
void matmul_ref(const QMatrix& w, const float* x, int64_t n_tokens, float* y);

// Name of the implementation chosen on this CPU (for logs and benchmarks).
const char* matmul_backend_name();

// The code paths, for tests and benchmarks that run each one explicitly. Generic is plain
// C++ and always available; Avx2 needs AVX2+FMA+F16C; Avx512 also AVX-512 F/BW/VL/VNNI
// (it has its own kernels for some types and runs Avx2's for the rest). cpu_features()
// (and so the MOENGINE_CPU cap) decides which ones are available and which matmul_rows uses.
enum class MatmulPath { Generic, Avx2, Avx512 };
MatmulPath matmul_best_path();
bool matmul_path_available(MatmulPath path);
const char* matmul_path_name(MatmulPath path);
// Whether `path` rounds the activations to bf16 for weights of type t (the AVX-512 BF16
// kernel multiplies bf16 pairs): its results then differ from the others by up to 2^-9 of
// each product on top of the order of float additions.
bool matmul_rounds_to_bf16(MatmulPath path, GgmlType t);

// matmul_rows on a given path; throws if the path is not available on this CPU.
void matmul_rows_with(MatmulPath path, const QMatrix& w, const PackedActs& x, float* y, int64_t ldy,
                      int64_t row_begin, int64_t row_end);

// matmul with activations already packed (x.fits(w.type)): y rows ldy floats apart.
void matmul_packed(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, ThreadPool& pool);

// A QMatrix over contiguous rows of `type` (row_stride = row_bytes(type, cols)).
inline QMatrix make_qmatrix(GgmlType type, int64_t rows, int64_t cols, const void* data) {
  return QMatrix{type, rows, cols, data, row_bytes(type, cols)};
}

}  // namespace moe
