#pragma once
// GPT-2 style byte-level token spelling: every byte is written as one printable code point
// (see byte_to_unicode), so a token's text maps back to its raw bytes. Vocabularies and
// merges are stored in this spelling; the tokenizer itself works on raw bytes.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace moe {

// GPT-2's reversible byte -> printable code point mapping.
uint32_t byte_to_unicode(uint8_t b);

// Byte-level spelling of raw bytes (each byte becomes the UTF-8 of byte_to_unicode).
std::string bytes_to_byte_level(std::string_view bytes);

// Raw bytes of a byte-level token's text; nullopt if it contains a code point that is not
// the image of a byte (such a token is not byte-level, e.g. a special token).
std::optional<std::string> byte_level_to_bytes(std::string_view token_text);

}  // namespace moe
