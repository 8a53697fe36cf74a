#pragma once
// Matrix products with weights in any supported GGUF type: y = W x for a batch of tokens.
// Decode (1 token) is a GEMV bound by memory bandwidth; prefill (many tokens) is a GEMM
// that reuses each weight block across tokens. The implementation is chosen once at run
// time from the CPU features; matmul_ref is the plain reference every path is tested
// against.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/ggml_type.h"

namespace moe {

class ThreadPool;

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
// (for example q8_0 blocks for q4_0/q5_0/q8_0 weights, q8_K blocks for k-quants), so that
// converting is not repeated for every row. Reused across calls to avoid allocation.
class PackedActs {
 public:
  // x: f32 [n_tokens, cols], rows ldx floats apart.
  void pack(GgmlType weight_type, const float* x, int64_t n_tokens, int64_t cols, int64_t ldx);
  GgmlType weight_type() const { return weight_type_; }
  int64_t n_tokens() const { return n_tokens_; }
  int64_t cols() const { return cols_; }
  const uint8_t* token(int64_t t) const { return buffer_.data() + t * token_bytes_; }

 private:
  GgmlType weight_type_ = GgmlType::F32;
  int64_t n_tokens_ = 0;
  int64_t cols_ = 0;
  size_t token_bytes_ = 0;
  std::vector<uint8_t> buffer_;
};

// y[t * ldy + r] = dot(W row r, x token t) for r in [row_begin, row_end) and every packed
// token. Single-threaded: callers split rows (or experts) over the pool themselves.
void matmul_rows(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, int64_t row_begin,
                 int64_t row_end);

// y: f32 [n_tokens, w.rows] = x: f32 [n_tokens, w.cols] times W^T, over the pool.
void matmul(const QMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

// Reference: dequantize each row with dequantize_row and accumulate in double.
void matmul_ref(const QMatrix& w, const float* x, int64_t n_tokens, float* y);

// Name of the implementation chosen on this CPU (for logs and benchmarks).
const char* matmul_backend_name();

}  // namespace moe
