#pragma once
// UTF-8 helpers shared by the tokenizer, the stream decoder and the template engine. They
// take bytes as they come: nothing here assumes the input is valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace moe {

std::string utf8_encode(uint32_t code_point);

// Length of the well-formed UTF-8 sequence starting at s[i] (1 to 4), or 0 when the bytes
// there are not one (stray continuation byte, overlong form, surrogate, truncated, > U+10FFFF).
size_t utf8_sequence_length(std::string_view s, size_t i);

// Code point of the well-formed sequence at s[i] of length utf8_sequence_length(s, i) > 0.
uint32_t utf8_decode_at(std::string_view s, size_t i, size_t len);

// Number of bytes at the end of s that are the start of a well-formed sequence still
// missing bytes (0 to 3): what a stream must hold back until the next bytes arrive.
size_t utf8_incomplete_tail(std::string_view s);

bool utf8_valid(std::string_view s);

}  // namespace moe
