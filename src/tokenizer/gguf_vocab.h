#pragma once
// The tokenizer as a GGUF file carries it (tokenizer.ggml.*), in llama.cpp's conventions:
// read from a model file, converted from a tokenizer.json the way llama.cpp's converter
// does it, and written into files gen-model makes.
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace moe {

class GgufFile;
class GgufWriter;

// GGUF tokenizer.ggml.token_type values.
enum GgufTokenType : int32_t { kTokenNormal = 1, kTokenUnknown = 2, kTokenControl = 3, kTokenUserDefined = 4, kTokenUnused = 5, kTokenByte = 6 };

struct GgufVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> token_types;
  std::vector<std::string> merges;  // "left right", by rank
  std::string pre;                  // tokenizer.ggml.pre; "" writes no key, as old converters did
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t eot_id = -1;
  int32_t pad_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  std::string chat_template;
};

// As llama.cpp's convert_hf_to_gguf writes a tokenizer.json: ids without a token become
// "[PAD<id>]" (unused) up to n_vocab (0: just the tokenizer's own size); added tokens that
// are special, or look like "<|...|>" / "<｜...｜>", are control tokens, other added tokens
// user-defined. Throws when the pre-tokenizer has no GGUF name.
GgufVocab gguf_vocab_from_spec(const TokenizerSpec& spec, int64_t n_vocab = 0);

void write_gguf_vocab(GgufWriter& w, const GgufVocab& v);

// Reads tokenizer.ggml.* (model "gpt2"); errors name the file and the key. Control tokens
// become special added tokens and user-defined ones plain added tokens. Text is split by
// llama.cpp's rules for tokenizer.ggml.pre (gguf_pre_tokenizer); without the key, by its
// 'default' rules, with a warning. The normalizer, which GGUF does not carry, is restored
// from the pre-tokenizer name (NFC for qwen2, as in Qwen's tokenizer.json).
TokenizerSpec tokenizer_spec_from_gguf(const GgufFile& f);

// A tokenizer.json (with tokenizer_config.json beside it) or a .gguf file.
Tokenizer load_tokenizer(const std::string& path);

}  // namespace moe
