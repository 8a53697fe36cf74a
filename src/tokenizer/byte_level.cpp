#include "tokenizer/byte_level.h"

#include <array>
#include <cstdint>

#include "tokenizer/utf8.h"

namespace moe {
namespace {

bool printable(uint32_t b) { return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff); }

struct Tables {
  std::array<uint16_t, 256> to_unicode{};
  std::array<std::string, 256> spelling;
  std::array<int16_t, 324> to_byte{};  // every image is below 256 + 68
};

const Tables& tables() {
  static const Tables t = [] {
    Tables t;
    t.to_byte.fill(-1);
    // Printable Latin-1 bytes map to themselves; the rest are shifted to 256 + n in order.
    uint16_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      t.to_unicode[b] = printable(b) ? uint16_t(b) : next++;
      t.spelling[b] = utf8_encode(t.to_unicode[b]);
      t.to_byte[t.to_unicode[b]] = int16_t(b);
    }
    return t;
  }();
  return t;
}

}  // namespace

uint32_t byte_to_unicode(uint8_t b) { return tables().to_unicode[b]; }

std::string bytes_to_byte_level(std::string_view bytes) {
  const Tables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) out += t.spelling[c];
  return out;
}

std::optional<std::string> byte_level_to_bytes(std::string_view s) {
  const Tables& t = tables();
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_sequence_length(s, i);
    if (len == 0 || len > 2) return std::nullopt;  // byte images are all below U+0800
    const uint32_t cp = utf8_decode_at(s, i, len);
    if (cp >= t.to_byte.size() || t.to_byte[cp] < 0) return std::nullopt;
    out += char(t.to_byte[cp]);
    i += len;
  }
  return out;
}

}  // namespace moe
