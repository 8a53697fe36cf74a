#pragma once
// Choosing the next token of one request from the model's logits.
//
// Each request owns a Sampler: its own generator (so a seeded request draws the same tokens
// whether it runs alone or inside any batch) and its own token counts for the penalties.
// The pipeline follows vLLM: penalties -> temperature -> top_k -> top_p -> min_p -> draw.
// Temperature 0 is greedy: the argmax of the penalised logits (penalties still apply, as in
// vLLM, so a greedy request with repetition_penalty does not loop).
//
// Logprobs are the log-softmax of the *raw* model logits, before penalties, temperature and
// filters. That is what OpenAI reports and vLLM's default (logprobs_mode=raw_logprobs): the
// model's belief, comparable across requests whatever their sampling settings.
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace moe {

struct SamplingParams {
  float temperature = 1.0f;          // 0 = greedy
  float top_p = 1.0f;                // (0, 1]; 1 = off
  int32_t top_k = 0;                 // 0 or -1 = off
  float min_p = 0.0f;                // [0, 1]; 0 = off
  float repetition_penalty = 1.0f;   // > 0; 1 = off; over prompt and output tokens
  float presence_penalty = 0.0f;     // [-2, 2]; on generated tokens
  float frequency_penalty = 0.0f;    // [-2, 2]; on generated tokens
  std::optional<uint64_t> seed;      // none: a random seed
  bool logprobs = false;             // report the chosen token's logprob
  int32_t top_logprobs = 0;          // [0, 20]; needs logprobs
  // (token, bias in [-100, 100]) added to the logits after the penalties, before
  // temperature and every filter; logprobs stay those of the model's own logits.
  std::vector<std::pair<int32_t, float>> logit_bias;

  // Throws moe::Error naming the first bad field and its allowed range.
  void validate() const;
};

struct TokenLogprob {
  int32_t token;
  float logprob;
};

// One token with its log-probability and the most likely tokens at its position.
struct TokenOutput {
  int32_t token = -1;
  float logprob = 0.0f;             // with SamplingParams::logprobs
  std::vector<TokenLogprob> top;    // SamplingParams::top_logprobs entries
};

// log-softmax(logits)[token] and the top_n most likely tokens (ties to the lower id), from
// one row of raw logits.
TokenOutput token_logprobs(const float* logits, int64_t n_vocab, int32_t token, int32_t top_n);

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;              // set when params.logprobs
  std::vector<TokenLogprob> top;     // params.top_logprobs entries, most likely first
};

class Sampler {
 public:
  // Validates the params. The prompt tokens count for the repetition penalty only.
  explicit Sampler(const SamplingParams& params, std::span<const int32_t> prompt = {});

  // The next token for these logits (one row of n_vocab). Fills *out (when given) with the
  // token and, if asked for, its logprob and the top logprobs. Does not record the token:
  // call accept() for each token that becomes part of the output.
  int32_t sample(const float* logits, int64_t n_vocab, SampleResult* out = nullptr);

  // Speculative decoding's check of a drafted token against the logits of its position,
  // keeping the output distribution exactly sample()'s. Greedy: the argmax (the draft is
  // accepted when it equals it). Sampled: the draft with the probability sample() would
  // draw it, else a draw from that distribution with the draft taken out (rejection
  // sampling against a drafter that proposes one token for certain). Like sample(), records
  // nothing.
  int32_t verify(const float* logits, int64_t n_vocab, int32_t draft, SampleResult* out = nullptr);

  // Records a generated token for the repetition, presence and frequency penalties.
  void accept(int32_t token);

  // Takes over a token that a twin of this sampler (same params, same prompt) drew on
  // another instance, as a decode instance does with its prefill instance's first token:
  // the generator skips the draw sample() made for it and the token is accepted, so every
  // later draw is the one the twin would have made.
  void replay(int32_t token);

  // Applies the repetition, frequency and presence penalties for the tokens seen so far to
  // one row of logits in place: sample()'s first step, public so it can be checked alone.
  void apply_penalties(float* logits, int64_t n_vocab) const;

  const SamplingParams& params() const { return params_; }

 private:
  bool has_penalties() const;
  // Fills z_, idx_, n_cand_ and m_ for a draw; false when the row is greedy (then the
  // token is greedy_token_).
  bool prepare(const float* logits, int64_t n_vocab);
  // exp(z - m) of prepared candidate i.
  double weight(int64_t i) const;
  // One draw from the prepared candidates, `excluded` (or -1) left out; total is the
  // weight of those drawn from.
  int32_t draw(int32_t excluded, double total);
  void fill_logprobs(const float* logits, int64_t n_vocab, int32_t token, SampleResult* out);
  double uniform();  // [0, 1), from our own bits so every standard library draws the same

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> prompt_tokens_;                 // sorted, unique
  std::unordered_map<int32_t, int32_t> output_counts_;  // generated token -> times seen
  // Scratch kept across calls so a step allocates nothing after the first.
  std::vector<float> z_;
  std::vector<int32_t> idx_;
  int64_t n_cand_ = 0;
  float m_ = 0.0f;
  int32_t greedy_token_ = -1;
};

int32_t argmax(const float* x, int64_t n);

}  // namespace moe
