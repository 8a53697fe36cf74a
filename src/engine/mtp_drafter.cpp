#include "engine/mtp_drafter.h"

#include "core/error.h"
#include "engine/sampling.h"

namespace moe {

namespace {

int32_t scratch_per_seq(int32_t k, int32_t block_size) { return (k - 1 + block_size - 1) / block_size; }

}  // namespace

int32_t MtpDrafter::scratch_blocks(int32_t num_speculative_tokens, int32_t block_size, int32_t max_seqs) {
  return scratch_per_seq(num_speculative_tokens, block_size) * max_seqs;
}

MtpDrafter::MtpDrafter(Model& model, KvStore& kv, int32_t num_speculative_tokens, int32_t n_blocks, int32_t max_seqs)
    : model_(model),
      kv_(kv),
      k_(num_speculative_tokens),
      n_blocks_(n_blocks),
      max_seqs_(max_seqs),
      scratch_per_seq_(scratch_per_seq(num_speculative_tokens, int32_t(kv.block_size()))) {
  if (kv.n_layers() <= model.config().n_layer) fail("the MTP drafter needs a KV cache with the MTP layer's rows");
  const int32_t scratch = scratch_per_seq_ * max_seqs;
  if (kv.n_blocks() < int64_t(n_blocks) + scratch) fail("the MTP drafter needs {} scratch blocks past the engine's {}", scratch, n_blocks);
}

std::vector<int32_t> MtpDrafter::propose(int64_t id, const std::vector<int32_t>& tokens, int32_t max_k) {
  const auto it = drafts_.find(id);
  if (it == drafts_.end() || it->second.n_tokens != tokens.size()) return {};
  std::vector<int32_t> d = it->second.tokens;
  if (int32_t(d.size()) > max_k) d.resize(size_t(max_k));
  return d;
}

void MtpDrafter::seed(int64_t id, size_t n_tokens, std::vector<int32_t> drafts) {
  if (drafts.empty()) return;
  if (int32_t(drafts.size()) > k_) drafts.resize(size_t(k_));
  drafts_[id] = Drafts{n_tokens, std::move(drafts)};
}

std::vector<int32_t> MtpDrafter::drafts(int64_t id) const {
  const auto it = drafts_.find(id);
  return it == drafts_.end() ? std::vector<int32_t>{} : it->second.tokens;
}

void MtpDrafter::run(const Step& step, const float* hidden, ThreadPool& pool) {
  const int64_t n_embd = model_.config().n_embd, n_vocab = model_.config().n_vocab;
  // An expert-parallel rank runs every round, the group's exchanges need it.
  if (step.tokens.empty() && !model_.expert_parallel()) return;
  logits_.resize(size_t(step.n_logit_rows() * n_vocab));
  hidden_out_.resize(step.tokens.size() * size_t(n_embd));
  model_.forward_mtp(step, hidden, kv_, logits_.data(), hidden_out_.data(), pool);
}

void MtpDrafter::idle_rounds(ThreadPool& pool) {
  const Step empty;
  for (int32_t r = 0; r < k_; ++r) run(empty, nullptr, pool);
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
  };
  std::vector<Wanted> wanted;
  int64_t offset = 0;
  size_t k = 0;
  for (const ScheduledSeq& s : plan.seqs) {
    const std::vector<int32_t>* e = s.produces_logits ? &emitted[k++] : nullptr;
    const int64_t at = offset;
    offset += s.n_tokens;
    const std::vector<int32_t>* tokens = tokens_of(s.id);
    if (!tokens) continue;
    // Positions whose KV the step kept: the chunk, less its rejected drafts. Each goes
    // with the token after it: the request's next token not drafted, then what it emitted.
    const int64_t n_valid = s.n_tokens - (e ? s.n_draft - int64_t(e->size() - 1) : 0);
    const int64_t known_end = std::min(int64_t(tokens->size()), s.pos0 + s.n_tokens - s.n_draft + 1);
    const size_t before = step.tokens.size();
    if (known_end > s.pos0 + 1) step.tokens.insert(step.tokens.end(), tokens->begin() + s.pos0 + 1, tokens->begin() + known_end);
    if (e) step.tokens.insert(step.tokens.end(), e->begin(), e->end());
    if (int64_t(step.tokens.size() - before) < n_valid) {
      step.tokens.resize(before);
      continue;
    }
    step.tokens.resize(before + size_t(n_valid));
    hidden_in_.insert(hidden_in_.end(), hidden + at * n_embd, hidden + (at + n_valid) * n_embd);
    step.seqs.push_back(SeqSlice{&s.block_table, s.pos0, n_valid, e ? LogitRows::kLast : LogitRows::kNone});
    if (e) wanted.push_back({s.id, step.seqs.size() - 1, s.pos0 + n_valid});
  }
  run(step, hidden_in_.data(), pool);

  std::vector<int64_t> last_token(step.seqs.size());
  int64_t t = 0;
  for (size_t i = 0; i < step.seqs.size(); ++i) last_token[i] = (t += step.seqs[i].n_tokens) - 1;
  std::vector<Chain> chains;
  std::vector<float> chain_hidden;
  for (size_t w = 0; w < wanted.size(); ++w) {
    const Wanted& x = wanted[w];
    drafts_[x.id] = Drafts{size_t(x.next_pos + 1), {argmax(logits_.data() + int64_t(w) * n_vocab, n_vocab)}};
    if (k_ <= 1) continue;
    std::vector<int32_t> table = *step.seqs[x.slice].block_table;
    const int64_t bs = kv_.block_size();
    table.resize(size_t((x.next_pos + bs - 1) / bs));
    const int32_t slot = int32_t(chains.size());
    if (slot >= max_seqs_) fail("the MTP drafter was sized for {} sequences a step", max_seqs_);
    for (int32_t b = 0; b < scratch_per_seq_; ++b) table.push_back(n_blocks_ + slot * scratch_per_seq_ + b);
    chains.push_back(Chain{x.id, std::move(table), x.next_pos});
    const float* h = hidden_out_.data() + last_token[x.slice] * n_embd;
    chain_hidden.insert(chain_hidden.end(), h, h + n_embd);
  }
  if (k_ > 1) chain(chains, std::move(chain_hidden), pool);
}

void MtpDrafter::chain(std::vector<Chain>& chains, std::vector<float> hidden, ThreadPool& pool) {
  const int64_t n_vocab = model_.config().n_vocab;
  Step step;
  for (const Chain& c : chains) step.seqs.push_back(SeqSlice{&c.table, 0, 1, LogitRows::kLast});
  step.tokens.resize(chains.size());
  for (int32_t r = 1; r < k_; ++r) {
    for (size_t i = 0; i < chains.size(); ++i) {
      step.tokens[i] = drafts_.at(chains[i].id).tokens.back();
      step.seqs[i].pos0 = chains[i].pos++;
    }
    run(step, hidden.data(), pool);
    for (size_t i = 0; i < chains.size(); ++i) {
      drafts_.at(chains[i].id).tokens.push_back(argmax(logits_.data() + int64_t(i) * n_vocab, n_vocab));
    }
    hidden.assign(hidden_out_.begin(), hidden_out_.end());
  }
}

}  // namespace moe
