#pragma once
// Lexer for the Jinja subset chat templates use: cuts the source into text and tags, and
// tokenizes the inside of tags. Whitespace follows the environment transformers renders
// with: trim_blocks and lstrip_blocks on, "-" modifiers strip all whitespace on their
// side, and one trailing newline of the source is dropped.
#include <string>
#include <vector>

namespace moe::jinja {

struct Token {
  enum Kind { Name, String, Int, Float, Op, End } kind = End;
  std::string text;
  int line = 0;
};

// A piece of the source: literal text, or a tag with its tokens.
struct Segment {
  enum Kind { Text, Expression, Statement, Comment } kind = Text;
  std::string text;
  std::vector<Token> tokens;
  int line = 0;
  bool strip_before = false, strip_after = false, keep_before = false;
};

// Throws moe::Error("chat template line N: ...") on malformed tags.
std::vector<Segment> lex_template(const std::string& source);

}  // namespace moe::jinja
