#pragma once
// One sequence run directly on a model with its own KV cache: the offline path used by
// `generate`, `bench model` and the correctness tests (prefill a prompt, then decode one
// token at a time). The serving engine batches many sequences instead.
#include <cstdint>
#include <vector>

#include "model/model.h"

namespace moe {

class ThreadPool;

class SingleSequence {
 public:
  // Room for max_len positions, in blocks of block_size, the cache stored as kv_dtype.
  SingleSequence(Model& model, int64_t max_len, KvDtype kv_dtype, int64_t block_size = 16);

  // Feeds tokens at the next positions in one batched step. With all_logits the result is
  // [tokens.size(), n_vocab], else the last token's row only.
  const std::vector<float>& prefill(const std::vector<int32_t>& tokens, bool all_logits, ThreadPool& pool);
  // Feeds one token; returns its logits [n_vocab].
  const std::vector<float>& decode(int32_t token, ThreadPool& pool);

  int64_t position() const { return pos_; }
  void reset() { pos_ = 0; }

 private:
  Model& model_;
  int64_t max_len_;
  KvStore kv_;
  std::vector<int32_t> table_;
  int64_t pos_ = 0;
  Step step_;
  std::vector<float> logits_;
};

}  // namespace moe
