#include "tokenizer/tokenizer.h"

#include "core/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/token_matcher.h"
#include "tokenizer/utf8.h"

namespace moe {
namespace {

// Unicode White_Space, which is what an added token's lstrip/rstrip swallows.
bool white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || cp == 0x20 || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
         cp == 0x3000;
}

std::string_view trim_left(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t len = utf8_sequence_length(s, i);
    if (len == 0 || !white_space(utf8_decode_at(s, i, len))) break;
    i += len;
  }
  return s.substr(i);
}

std::string_view trim_right(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && end - start < 4 && (uint8_t(s[start]) & 0xc0) == 0x80) --start;
    const size_t len = utf8_sequence_length(s, start);
    if (len != end - start || !white_space(utf8_decode_at(s, start, len))) break;
    end = start;
  }
  return s.substr(0, end);
}

// Text cut at added tokens: runs of text, each followed by the token that ended it (id -1
// after the last run). Whitespace that an lstrip/rstrip token swallows is already gone.
struct Section {
  std::string_view text;
  int32_t token;
};

std::vector<Section> cut_at_tokens(std::string_view text, const TokenMatcher& m, const std::vector<uint8_t>& strip) {
  std::vector<Section> out;
  size_t pos = 0;
  TokenMatcher::Match hit;
  while (m.find(text, pos, hit)) {
    out.push_back({text.substr(pos, hit.begin - pos), hit.id});
    pos = hit.end;
  }
  out.push_back({text.substr(pos), -1});
  for (size_t i = 0; i < out.size(); ++i) {
    const int32_t id = out[i].token;
    if (id < 0) continue;
    if (strip[size_t(id)] & 1) out[i].text = trim_right(out[i].text);
    if ((strip[size_t(id)] & 2) && i + 1 < out.size()) out[i + 1].text = trim_left(out[i + 1].text);
  }
  return out;
}

std::unique_ptr<TokenMatcher> make_matcher(const std::vector<AddedToken>& added, bool normalized, bool with_special) {
  auto m = std::make_unique<TokenMatcher>();
  for (const AddedToken& t : added)
    if (t.normalized == normalized && (with_special || !t.special)) m->add(t.content, t.id);
  return m;
}

}  // namespace

Tokenizer::Tokenizer(TokenizerSpec spec) : spec_(std::move(spec)), normalizer_(spec_.normalizer) {
  const size_t n = spec_.tokens.size();
  for (int32_t id : {spec_.bos_id, spec_.eos_id, spec_.eot_id, spec_.pad_id})
    if (id >= int32_t(n)) fail("special token id {} is outside the vocabulary of {} tokens", id, n);
  bytes_.resize(n);
  special_.assign(n, 0);
  strip_.assign(n, 0);
  std::vector<uint8_t> is_added(n, 0);
  for (const AddedToken& t : spec_.added) {
    if (t.id < 0 || size_t(t.id) >= n) fail("added token '{}' has id {} outside the vocabulary", t.content, t.id);
    if (t.content.empty()) fail("added token {} is empty", t.id);
    is_added[size_t(t.id)] = 1;
    special_[size_t(t.id)] = t.special;
    strip_[size_t(t.id)] = uint8_t((t.lstrip ? 1 : 0) | (t.rstrip ? 2 : 0));
  }
  // An added token stands for its own text; a regular token's spelling is byte-level, but
  // a vocabulary may hold the odd token that is not (it then stands for its text as is).
  std::vector<std::string> bpe_tokens(n);
  for (size_t i = 0; i < n; ++i) {
    if (is_added[i]) {
      bytes_[i] = spec_.tokens[i];
    } else {
      bytes_[i] = byte_level_to_bytes(spec_.tokens[i]).value_or(spec_.tokens[i]);
      bpe_tokens[i] = spec_.tokens[i];
    }
  }
  bpe_ = std::make_unique<BpeModel>(bpe_tokens, spec_.merges, spec_.ignore_merges);
  pre_ = std::make_unique<PreTokenizer>(spec_.pre);
  raw_all_ = make_matcher(spec_.added, false, true);
  raw_plain_ = make_matcher(spec_.added, false, false);
  norm_all_ = make_matcher(spec_.added, true, true);
  norm_plain_ = make_matcher(spec_.added, true, false);
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && spec_.add_bos && spec_.bos_id >= 0) out.push_back(spec_.bos_id);
  encode_text(text, parse_special, out);
  if (add_special && spec_.add_eos && spec_.eos_id >= 0) out.push_back(spec_.eos_id);
  return out;
}

void Tokenizer::encode_text(std::string_view text, bool parse_special, std::vector<int32_t>& out) const {
  const TokenMatcher& raw = parse_special ? *raw_all_ : *raw_plain_;
  const TokenMatcher& norm = parse_special ? *norm_all_ : *norm_plain_;
  for (const Section& sec : cut_at_tokens(text, raw, strip_)) {
    // Stray bytes cannot be normalized or matched by a UTF-8 regex: each one is a word.
    std::string_view rest = sec.text;
    while (!rest.empty()) {
      size_t valid = 0;
      while (valid < rest.size()) {
        const size_t len = utf8_sequence_length(rest, valid);
        if (len == 0) break;
        valid += len;
      }
      if (valid > 0) {
        const std::string_view run = rest.substr(0, valid);
        const std::string normalized = normalizer_.empty() ? std::string() : normalizer_.apply(run);
        const std::string_view ntext = normalizer_.empty() ? run : std::string_view(normalized);
        if (norm.empty()) {
          encode_normalized(ntext, out);
        } else {
          for (const Section& inner : cut_at_tokens(ntext, norm, strip_)) {
            encode_normalized(inner.text, out);
            if (inner.token >= 0) out.push_back(inner.token);
          }
        }
      }
      if (valid < rest.size()) bpe_->encode_word(rest.substr(valid, 1), out);
      rest.remove_prefix(std::min(rest.size(), valid + 1));
    }
    if (sec.token >= 0) out.push_back(sec.token);
  }
}

void Tokenizer::encode_normalized(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::vector<std::string_view> words;
  std::deque<std::string> owned;
  pre_->split(text, words, owned);
  for (std::string_view w : words) bpe_->encode_word(w, out);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    out += token_bytes(id);
  }
  return out;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || size_t(id) >= bytes_.size()) fail("token id {} is outside the vocabulary (0..{})", id, bytes_.size() - 1);
  return bytes_[size_t(id)];
}

bool Tokenizer::is_special(int32_t id) const { return id >= 0 && size_t(id) < special_.size() && special_[size_t(id)]; }

}  // namespace moe
