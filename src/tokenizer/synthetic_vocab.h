#pragma once
// A byte-level BPE vocabulary made from a fixed word list, for the models gen-model writes.
// It has the GGUF "gpt2" shape (256 byte tokens in GPT-2's byte-to-unicode spelling, merges,
// special tokens), so the same tokenizer code that reads DeepSeek-V3 or Qwen3 files reads
// it, and any text round-trips through it. The same size always gives the same vocabulary.
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/utf8.h"

namespace moe {

enum class VocabFlavor { Deepseek, Qwen };

// The same keys a real model's file has.
using SyntheticVocab = GgufVocab;

// n_vocab must leave room for the 256 byte tokens and the flavor's special tokens.
SyntheticVocab make_synthetic_vocab(int64_t n_vocab, VocabFlavor flavor);

}  // namespace moe
