#include "tokenizer/utf8.h"

namespace moe {

std::string utf8_encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xc0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    s += char(0xe0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3f));
    s += char(0x80 | (cp & 0x3f));
  } else {
    s += char(0xf0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3f));
    s += char(0x80 | ((cp >> 6) & 0x3f));
    s += char(0x80 | (cp & 0x3f));
  }
  return s;
}

namespace {

// Expected length from the lead byte and the allowed range of the second byte, per the
// well-formed byte sequence table of the Unicode standard (which rules out overlong forms
// and surrogates through the second byte alone).
struct Lead {
  uint8_t len, lo, hi;
};

Lead lead_of(uint8_t c) {
  if (c < 0x80) return {1, 0, 0};
  if (c < 0xc2) return {0, 0, 0};
  if (c < 0xe0) return {2, 0x80, 0xbf};
  if (c == 0xe0) return {3, 0xa0, 0xbf};
  if (c == 0xed) return {3, 0x80, 0x9f};
  if (c < 0xf0) return {3, 0x80, 0xbf};
  if (c == 0xf0) return {4, 0x90, 0xbf};
  if (c < 0xf4) return {4, 0x80, 0xbf};
  if (c == 0xf4) return {4, 0x80, 0x8f};
  return {0, 0, 0};
}

bool continuation(uint8_t c) { return (c & 0xc0) == 0x80; }

}  // namespace

size_t utf8_sequence_length(std::string_view s, size_t i) {
  const Lead l = lead_of(uint8_t(s[i]));
  if (l.len <= 1) return l.len;
  if (i + l.len > s.size()) return 0;
  const uint8_t second = uint8_t(s[i + 1]);
  if (second < l.lo || second > l.hi) return 0;
  for (size_t k = 2; k < l.len; ++k)
    if (!continuation(uint8_t(s[i + k]))) return 0;
  return l.len;
}

uint32_t utf8_decode_at(std::string_view s, size_t i, size_t len) {
  const uint8_t c = uint8_t(s[i]);
  if (len == 1) return c;
  uint32_t cp = c & (0x7f >> len);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (uint8_t(s[i + k]) & 0x3f);
  return cp;
}

size_t utf8_incomplete_tail(std::string_view s) {
  // A lead byte at most 3 bytes from the end whose sequence would run past the end and whose
  // bytes so far are all valid for that lead.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t i = n - back;
    const uint8_t c = uint8_t(s[i]);
    if (continuation(c)) continue;
    const Lead l = lead_of(c);
    if (l.len <= back) return 0;
    if (back >= 2) {
      const uint8_t second = uint8_t(s[i + 1]);
      if (second < l.lo || second > l.hi) return 0;
    }
    return back;
  }
  return 0;
}

bool utf8_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_sequence_length(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

}  // namespace moe
