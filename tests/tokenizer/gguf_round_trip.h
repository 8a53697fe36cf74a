#pragma once
// Writes a tokenizer vocabulary into an in-memory GGUF file, as gen-model does, and loads
// it back the way a model file's tokenizer is loaded.
#include <cstdint>
#include <vector>

#include "model/gguf.h"
#include "tokenizer/gguf_vocab.h"

namespace moe::test {

struct GgufTokenizer {
  std::vector<uint8_t> bytes;
  Tokenizer tok;
};

inline GgufTokenizer through_gguf(const GgufVocab& v, const char* name = "vocab.gguf") {
  GgufWriter w;
  w.set_string("general.architecture", "deepseek2");
  write_gguf_vocab(w, v);
  std::vector<uint8_t> bytes = w.to_bytes();
  const GgufFile f(name, bytes.data(), bytes.size());
  return {std::move(bytes), Tokenizer(tokenizer_spec_from_gguf(f))};
}

}  // namespace moe::test
