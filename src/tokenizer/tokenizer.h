#pragma once
// Byte-level BPE tokenizer, built from a Hugging Face tokenizer.json or from a GGUF file's
// tokenizer.ggml.* metadata, that gives the same ids as the model's own tokenizer.
//
// encode: added tokens (special ones such as <|im_start|>, and user-defined ones) are found
// first, leftmost-longest; the text between them is normalized, pre-tokenized into words,
// and each word's bytes are BPE-merged. Input that is not valid UTF-8 is still encoded:
// each stray byte becomes a word of its own, so any bytes survive a round trip.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace moe {

class BpeModel;
class TokenMatcher;

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = true;      // skipped by decode(skip_special); matched only with parse_special
  bool lstrip = false;      // swallows whitespace on its left
  bool rstrip = false;      // swallows whitespace on its right
  bool normalized = false;  // matched in normalized text rather than in the raw input
};

// Everything a tokenizer is made of, as plain data: what the loaders produce and what a
// GGUF writer needs.
struct TokenizerSpec {
  // By id: regular tokens in byte-level spelling, added tokens as their text; "" for an
  // id the vocabulary leaves unused.
  std::vector<std::string> tokens;
  std::vector<std::pair<std::string, std::string>> merges;  // by rank, byte-level spelling
  bool ignore_merges = false;
  std::vector<AddedToken> added;
  std::vector<NormalForm> normalizer;
  std::vector<PreTokenizerStep> pre;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t eot_id = -1;  // end of turn, where it differs from eos (GGUF only)
  int32_t pad_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  std::string chat_template;
};

class Tokenizer {
 public:
  explicit Tokenizer(TokenizerSpec spec);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // add_special: prepend BOS / append EOS as the file asks (add_bos_token, add_eos_token).
  // parse_special: whether special tokens written in the text become their ids; turn it
  // off for untrusted text (non-special added tokens are matched either way).
  std::vector<int32_t> encode(std::string_view text, bool add_special = false, bool parse_special = true) const;

  // Raw bytes of the tokens, concatenated; the result may end in (or, for ids that never
  // follow one another in encoded text, contain) an incomplete UTF-8 sequence.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Raw bytes of one token; throws moe::Error for an id outside the vocabulary.
  const std::string& token_bytes(int32_t id) const;
  bool is_special(int32_t id) const;
  int32_t n_vocab() const { return int32_t(spec_.tokens.size()); }

  int32_t bos_id() const { return spec_.bos_id; }
  int32_t eos_id() const { return spec_.eos_id; }
  int32_t eot_id() const { return spec_.eot_id; }
  bool add_bos() const { return spec_.add_bos; }
  const std::string& chat_template() const { return spec_.chat_template; }
  const TokenizerSpec& spec() const { return spec_; }

 private:
  void encode_text(std::string_view text, bool parse_special, std::vector<int32_t>& out) const;
  void encode_normalized(std::string_view text, std::vector<int32_t>& out) const;

  TokenizerSpec spec_;
  std::unique_ptr<BpeModel> bpe_;
  std::unique_ptr<PreTokenizer> pre_;
  Normalizer normalizer_;
  // raw: added tokens matched before normalization; normalized: after it. Each also has a
  // variant without special tokens, for parse_special = false.
  std::unique_ptr<TokenMatcher> raw_all_, raw_plain_, norm_all_, norm_plain_;
  std::vector<std::string> bytes_;  // raw bytes by id
  std::vector<uint8_t> special_;    // by id
  std::vector<uint8_t> strip_;      // by id: bit 0 lstrip, bit 1 rstrip
};

// Loads tokenizer.json, and tokenizer_config.json from the same folder when it is there
// (chat template, BOS/EOS, add_bos_token). Errors name the file and the field.
Tokenizer load_hf_tokenizer(const std::string& tokenizer_json_path);
TokenizerSpec read_hf_tokenizer_spec(const std::string& tokenizer_json_path);

}  // namespace moe
