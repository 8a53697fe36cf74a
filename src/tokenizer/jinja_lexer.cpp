#include "tokenizer/jinja_lexer.h"

#include <cctype>

#include "core/error.h"

namespace moe::jinja {
namespace {

[[noreturn]] void error(int line, const std::string& msg) { fail("chat template line {}: {}", line, msg); }

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  explicit Lexer(const std::string& src) : s_(src) {
    if (!s_.empty() && s_.back() == '\n') s_.pop_back();
  }

  std::vector<Segment> run() {
    std::vector<Segment> out;
    while (pos_ < s_.size()) {
      const size_t open = find_open(pos_);
      if (open > pos_) out.push_back({Segment::Text, s_.substr(pos_, open - pos_), {}, line_at(pos_)});
      if (open >= s_.size()) break;
      out.push_back(tag(open));
    }
    apply_whitespace(out);
    return out;
  }

 private:
  size_t find_open(size_t from) const {
    for (size_t i = from; i + 1 < s_.size(); ++i)
      if (s_[i] == '{' && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    return s_.size();
  }

  int line_at(size_t p) {
    while (line_pos_ < p) line_ += s_[line_pos_++] == '\n';
    return line_;
  }

  Segment tag(size_t open) {
    Segment seg;
    seg.line = line_at(open);
    const char k = s_[open + 1];
    seg.kind = k == '{' ? Segment::Expression : k == '%' ? Segment::Statement : Segment::Comment;
    size_t p = open + 2;
    if (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) {
      (s_[p] == '-' ? seg.strip_before : seg.keep_before) = true;
      ++p;
    }
    if (seg.kind == Segment::Comment) {
      const size_t close = s_.find("#}", p);
      if (close == std::string::npos) error(seg.line, "unclosed comment");
      seg.strip_after = close > p && s_[close - 1] == '-';
      pos_ = close + 2;
      return seg;
    }
    const std::string closer = seg.kind == Segment::Expression ? "}}" : "%}";
    for (;;) {
      while (p < s_.size() && is_space(s_[p])) ++p;
      if (p >= s_.size()) error(seg.line, "tag opened here is never closed");
      if (s_[p] == '-' && s_.compare(p + 1, 2, closer) == 0) {
        seg.strip_after = true;
        pos_ = p + 3;
        return seg;
      }
      if (s_.compare(p, 2, closer) == 0) {
        pos_ = p + 2;
        return seg;
      }
      seg.tokens.push_back(token(p));
    }
  }

  Token token(size_t& p) {
    Token t;
    t.line = line_at(p);
    const char c = s_[p];
    if (std::isalpha(uint8_t(c)) || c == '_') {
      size_t e = p;
      while (e < s_.size() && (std::isalnum(uint8_t(s_[e])) || s_[e] == '_')) ++e;
      t = {Token::Name, s_.substr(p, e - p), t.line};
      p = e;
    } else if (std::isdigit(uint8_t(c))) {
      size_t e = p;
      bool is_float = false;
      while (e < s_.size() && (std::isdigit(uint8_t(s_[e])) || s_[e] == '_' ||
                               (s_[e] == '.' && !is_float && e + 1 < s_.size() && std::isdigit(uint8_t(s_[e + 1]))))) {
        is_float |= s_[e] == '.';
        ++e;
      }
      std::string digits;
      for (size_t k = p; k < e; ++k)
        if (s_[k] != '_') digits += s_[k];
      t = {is_float ? Token::Float : Token::Int, digits, t.line};
      p = e;
    } else if (c == '\'' || c == '"') {
      t.kind = Token::String;
      size_t e = p + 1;
      for (; e < s_.size() && s_[e] != c; ++e) {
        if (s_[e] != '\\' || e + 1 >= s_.size()) {
          t.text += s_[e];
          continue;
        }
        const char n = s_[++e];
        switch (n) {
          case 'n': t.text += '\n'; break;
          case 't': t.text += '\t'; break;
          case 'r': t.text += '\r'; break;
          case 'b': t.text += '\b'; break;
          case 'f': t.text += '\f'; break;
          case '\\': case '\'': case '"': t.text += n; break;
          default: t.text += '\\'; t.text += n;  // Python keeps unknown escapes as written
        }
      }
      if (e >= s_.size()) error(t.line, "unterminated string literal");
      p = e + 1;
    } else {
      static const char* const ops[] = {"//", "**", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}", ".", ",", ":",
                                        "|", "+", "-", "*", "/", "%", "~", "<", ">", "="};
      for (const char* op : ops) {
        if (s_.compare(p, std::char_traits<char>::length(op), op) == 0) {
          t = {Token::Op, op, t.line};
          p += t.text.size();
          return t;
        }
      }
      error(t.line, fmt::format("unexpected character '{}'", c));
    }
    return t;
  }

  // trim_blocks / lstrip_blocks and the "-" modifiers, applied to the text around tags.
  static void apply_whitespace(std::vector<Segment>& segs) {
    bool line_starting = true;  // nothing but whitespace yet on the current output line
    for (size_t i = 0; i < segs.size(); ++i) {
      Segment& g = segs[i];
      if (g.kind == Segment::Text) continue;
      Segment* prev = i > 0 && segs[i - 1].kind == Segment::Text ? &segs[i - 1] : nullptr;
      Segment* next = i + 1 < segs.size() && segs[i + 1].kind == Segment::Text ? &segs[i + 1] : nullptr;
      const bool block = g.kind != Segment::Expression;
      if (prev && g.strip_before) {
        while (!prev->text.empty() && is_space(prev->text.back())) prev->text.pop_back();
      } else if (prev && block && !g.keep_before) {
        const size_t nl = prev->text.rfind('\n');
        const size_t from = nl == std::string::npos ? 0 : nl + 1;
        const bool at_line_start = nl != std::string::npos || (i == 1 || line_starting);
        if (at_line_start && prev->text.find_first_not_of(" \t", from) == std::string::npos) prev->text.erase(from);
      }
      line_starting = false;
      if (next && g.strip_after) {
        size_t k = 0;
        while (k < next->text.size() && is_space(next->text[k])) ++k;
        next->text.erase(0, k);
      } else if (next && block && !next->text.empty() && next->text[0] == '\n') {
        next->text.erase(0, 1);
        line_starting = true;
      }
    }
  }

  std::string s_;
  size_t pos_ = 0;
  size_t line_pos_ = 0;
  int line_ = 1;
};

}  // namespace

std::vector<Segment> lex_template(const std::string& source) { return Lexer(source).run(); }

}  // namespace moe::jinja
