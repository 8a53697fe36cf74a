#include "engine/single_sequence.h"

#include "core/error.h"

namespace moe {

SingleSequence::SingleSequence(Model& model, int64_t max_len, KvDtype kv_dtype, int64_t block_size)
    : model_(model),
      max_len_(max_len),
      kv_(model.make_kv_store(block_size, (max_len + block_size - 1) / block_size, kv_dtype)) {
  for (int32_t b = 0; b < int32_t(kv_.n_blocks()); ++b) table_.push_back(b);
  step_.seqs.resize(1);
  step_.seqs[0].block_table = &table_;
}

const std::vector<float>& SingleSequence::prefill(const std::vector<int32_t>& tokens, bool all_logits,
                                                  ThreadPool& pool) {
  if (tokens.empty()) fail("prefill needs at least one token");
  if (pos_ + int64_t(tokens.size()) > max_len_) {
    fail("sequence of {} tokens exceeds the context of {}", pos_ + int64_t(tokens.size()), max_len_);
  }
  step_.tokens = tokens;
  step_.seqs[0].pos0 = pos_;
  step_.seqs[0].n_tokens = int64_t(tokens.size());
  step_.seqs[0].logits = all_logits ? LogitRows::kAll : LogitRows::kLast;
  logits_.resize(size_t(step_.n_logit_rows() * model_.config().n_vocab));
  model_.forward(step_, kv_, logits_.data(), pool);
  pos_ += int64_t(tokens.size());
  return logits_;
}

const std::vector<float>& SingleSequence::decode(int32_t token, ThreadPool& pool) {
  return prefill({token}, false, pool);
}

}  // namespace moe
