#include "engine/mtp_drafter.h"

#include "core/error.h"
#include "engine/sampling.h"

namespace moe {

MtpDrafter::MtpDrafter(Model& model, int32_t num_speculative_tokens, int32_t block_size, int32_t n_blocks, KvDtype dtype)
    : model_(model),
      k_(num_speculative_tokens),
      block_size_(block_size),
      n_blocks_(n_blocks),
      // Chained drafts write rows past a sequence's reserved positions: into blocks only
      // they use, after the engine's (one sequence at a time, so they can share them).
      n_scratch_((num_speculative_tokens + block_size - 1) / block_size + 1),
      kv_(model.make_mtp_kv_store(block_size, n_blocks + n_scratch_, dtype)) {}

std::vector<int32_t> MtpDrafter::propose(int64_t id, const std::vector<int32_t>& tokens, int32_t max_k) {
  const auto it = drafts_.find(id);
  if (it == drafts_.end() || it->second.n_tokens != tokens.size()) return {};
  std::vector<int32_t> d = it->second.tokens;
  if (int32_t(d.size()) > max_k) d.resize(size_t(max_k));
  return d;
}

void MtpDrafter::after_step(const StepPlan& plan, const std::vector<std::vector<int32_t>>& emitted, const float* hidden,
                            const std::function<const std::vector<int32_t>*(int64_t)>& tokens_of, ThreadPool& pool) {
  const int64_t n_embd = model_.config().n_embd, n_vocab = model_.config().n_vocab;
  Step step;
  hidden_in_.clear();
  struct Wanted {
    int64_t id;
    size_t slice;
    int64_t next_pos;
    size_t n_tokens;
  };
  std::vector<Wanted> wanted;
  int64_t offset = 0;
  size_t k = 0;
  for (const ScheduledSeq& s : plan.seqs) {
    const std::vector<int32_t>* e = s.produces_logits ? &emitted[k++] : nullptr;
    const int64_t at = offset;
    offset += s.n_tokens;
    const std::vector<int32_t>* tokens = tokens_of(s.id);
    // Positions whose KV the step kept: the chunk, less its rejected drafts. Each goes
    // with the token after it, which the request now has.
    const int64_t n_valid = s.n_tokens - (e ? s.n_draft - int64_t(e->size() - 1) : 0);
    if (!tokens || int64_t(tokens->size()) < s.pos0 + n_valid + 1) continue;
    step.tokens.insert(step.tokens.end(), tokens->begin() + s.pos0 + 1, tokens->begin() + s.pos0 + n_valid + 1);
    hidden_in_.insert(hidden_in_.end(), hidden + at * n_embd, hidden + (at + n_valid) * n_embd);
    step.seqs.push_back(SeqSlice{&s.block_table, s.pos0, n_valid, e ? LogitRows::kLast : LogitRows::kNone});
    if (e) wanted.push_back({s.id, step.seqs.size() - 1, s.pos0 + n_valid, tokens->size()});
  }
  if (step.tokens.empty()) return;
  logits_.resize(size_t(step.n_logit_rows() * n_vocab));
  hidden_out_.resize(step.tokens.size() * size_t(n_embd));
  model_.forward_mtp(step, hidden_in_.data(), kv_, logits_.data(), hidden_out_.data(), pool);

  std::vector<int64_t> last_token(step.seqs.size());
  int64_t t = 0;
  for (size_t i = 0; i < step.seqs.size(); ++i) last_token[i] = (t += step.seqs[i].n_tokens) - 1;
  for (size_t w = 0; w < wanted.size(); ++w) {
    const Wanted& x = wanted[w];
    drafts_[x.id] = Drafts{x.n_tokens, {argmax(logits_.data() + int64_t(w) * n_vocab, n_vocab)}};
  }
  if (k_ <= 1) return;
  // The chained drafts reuse the step's buffers: take what they need first.
  std::vector<std::pair<const Wanted*, std::vector<float>>> chains;
  for (const Wanted& x : wanted) {
    const float* h = hidden_out_.data() + last_token[x.slice] * n_embd;
    chains.emplace_back(&x, std::vector<float>(h, h + n_embd));
  }
  for (auto& [x, h] : chains) chain(x->id, *step.seqs[x->slice].block_table, x->next_pos, std::move(h), pool);
}

void MtpDrafter::chain(int64_t id, std::vector<int32_t> table, int64_t pos, std::vector<float> h, ThreadPool& pool) {
  const int64_t n_embd = model_.config().n_embd, n_vocab = model_.config().n_vocab;
  table.resize(size_t((pos + block_size_ - 1) / block_size_));
  for (int32_t b = 0; b < n_scratch_; ++b) table.push_back(n_blocks_ + b);
  Drafts& d = drafts_.at(id);
  Step step;
  step.tokens.resize(1);
  step.seqs.push_back(SeqSlice{&table, 0, 1, LogitRows::kLast});
  logits_.resize(size_t(n_vocab));
  hidden_out_.resize(size_t(n_embd));
  while (int32_t(d.tokens.size()) < k_) {
    step.tokens[0] = d.tokens.back();
    step.seqs[0].pos0 = pos++;
    model_.forward_mtp(step, h.data(), kv_, logits_.data(), hidden_out_.data(), pool);
    d.tokens.push_back(argmax(logits_.data(), n_vocab));
    h.assign(hidden_out_.begin(), hidden_out_.end());
  }
}

}  // namespace moe
