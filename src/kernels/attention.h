#pragma once
// Causal attention over a paged KV cache, flash-style (online softmax, one pass over the
// keys). One kernel covers GQA (separate K and V per KV head) and DeepSeek's absorbed MLA
// (one latent row per position that serves as the key and whose first dv values are the
// value; every query head shares it: n_kv_heads = 1).
#include <cstdint>
#include <span>

#include "kernels/kv_format.h"

namespace moe {

class ThreadPool;

// Positions [0, n) of one sequence: position p lives in blocks[p / block_size] at row
// p % block_size. Rows are row_stride bytes apart inside a block and stored as `format`
// says (f32, 16-bit, fp8 or q8_0: kernels/kv_format.h); the kernels convert what they read.
struct KvView {
  const uint8_t* const* blocks = nullptr;
  int64_t block_size = 0;
  int64_t row_stride = 0;
  const KvRowFormat* format = nullptr;
};

struct AttentionShape {
  int n_q_heads = 0;
  int n_kv_heads = 0;        // query head h uses kv head h / (n_q_heads / n_kv_heads)
  int64_t dk = 0;            // query/key dims per head
  int64_t dv = 0;            // value dims per head
  // Where heads' keys and values lie in a row, in floats of the decoded row. Each head's
  // key and value must be whole groups of the row format (KvRowFormat::whole_groups).
  int64_t k_offset = 0;      // floats from the row start to kv head 0's key
  int64_t k_head_stride = 0; // floats between kv heads' keys in a row
  int64_t v_offset = 0;      // floats from the row start to kv head 0's value
  int64_t v_head_stride = 0; // floats between kv heads' values in a row
  float scale = 1.0f;        // applied to q.k
};

// q: f32 [n_tokens, n_q_heads, dk] (token rows q_stride floats apart);
// out: f32 [n_tokens, n_q_heads, dv] (rows out_stride floats apart).
// Token i is at position pos0 + i and attends to positions [0, pos0 + i].
void attention(const AttentionShape& s, const float* q, int64_t q_stride, int64_t n_tokens,
               int64_t pos0, const KvView& kv, float* out, int64_t out_stride, ThreadPool& pool);

// One sequence of a batched call: its arguments to attention().
struct AttentionSeq {
  const float* q = nullptr;
  int64_t q_stride = 0;
  int64_t n_tokens = 0;
  int64_t pos0 = 0;
  KvView kv;
  float* out = nullptr;
  int64_t out_stride = 0;
};

// attention() for every sequence of a step in one parallel dispatch (a decode step's
// sequences are each too small to keep the threads busy alone). Each row's result is the
// one attention() gives it.
void attention_batch(const AttentionShape& s, std::span<const AttentionSeq> seqs, ThreadPool& pool);
void attention_ref(const AttentionShape& s, const float* q, int64_t q_stride, int64_t n_tokens,
                   int64_t pos0, const KvView& kv, float* out, int64_t out_stride);

// Name of the implementation chosen on this CPU (for logs and benchmarks).
const char* attention_backend_name();

}  // namespace moe
