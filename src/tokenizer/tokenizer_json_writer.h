#pragma once
// Writes a tokenizer as a Hugging Face checkpoint holds it: tokenizer.json (BPE model,
// added tokens, normalizer, pre-tokenizer, ByteLevel decoder) and tokenizer_config.json
// (special tokens, add_bos_token, chat template). read_hf_tokenizer_spec reads back the
// same spec.
#include <string>

#include "tokenizer/tokenizer.h"

namespace moe {

void write_hf_tokenizer(const TokenizerSpec& spec, const std::string& dir);

}  // namespace moe
