// Parser for the Jinja subset chat templates use: statements into a tree of nodes, and
// expressions with Jinja2's operator precedence.
#include "core/error.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_lexer.h"

namespace moe::jinja {
namespace {

[[noreturn]] void error(int line, const std::string& msg) { fail("chat template line {}: {}", line, msg); }

class Parser {
 public:
  explicit Parser(std::vector<Segment> segs) : segs_(std::move(segs)) {}

  Body parse_all() {
    Body body = parse_body({});
    if (seg_ < segs_.size()) error(segs_[seg_].line, fmt::format("unexpected '{{% {} %}}'", keyword(segs_[seg_])));
    return body;
  }

 private:
  static std::string keyword(const Segment& s) { return s.tokens.empty() ? "" : s.tokens[0].text; }

  // Parses nodes until a statement whose keyword is in `stops` (left unconsumed).
  Body parse_body(const std::vector<std::string>& stops) {
    Body body;
    while (seg_ < segs_.size()) {
      Segment& g = segs_[seg_];
      if (g.kind == Segment::Comment) {
        ++seg_;
        continue;
      }
      if (g.kind == Segment::Text) {
        if (!g.text.empty()) {
          auto n = node(Node::Kind::Text, g.line);
          n->text = g.text;
          body.push_back(std::move(n));
        }
        ++seg_;
        continue;
      }
      start(g);
      if (g.kind == Segment::Expression) {
        auto n = node(Node::Kind::Output, g.line);
        n->expr = expression();
        finish();
        body.push_back(std::move(n));
        ++seg_;
        continue;
      }
      const std::string kw = keyword(g);
      for (const std::string& s : stops)
        if (kw == s) return body;
      body.push_back(statement(kw));
    }
    if (!stops.empty()) error(segs_.empty() ? 0 : segs_.back().line, fmt::format("missing '{{% {} %}}'", stops.back()));
    return body;
  }

  NodePtr statement(const std::string& kw) {
    const int line = segs_[seg_].line;
    next();  // the keyword
    if (kw == "if") {
      auto n = node(Node::Kind::If, line);
      ExprPtr cond = expression();
      finish();
      ++seg_;
      for (;;) {
        Body b = parse_body({"elif", "else", "endif"});
        n->branches.emplace_back(std::move(cond), std::move(b));
        start(segs_[seg_]);
        const std::string k = next().text;
        if (k == "elif") {
          cond = expression();
          finish();
          ++seg_;
          continue;
        }
        finish();
        ++seg_;
        if (k == "else") {
          n->else_body = parse_body({"endif"});
          start(segs_[seg_]);
          next();
          finish();
          ++seg_;
        }
        return n;
      }
    }
    if (kw == "for") {
      auto n = node(Node::Kind::For, line);
      do n->targets.push_back(name()); while (accept(","));
      expect_name("in");
      n->expr = expression(false);
      if (accept_name("if")) n->cond = expression();
      finish();
      ++seg_;
      n->body = parse_body({"else", "endfor"});
      start(segs_[seg_]);
      if (next().text == "else") {
        finish();
        ++seg_;
        n->else_body = parse_body({"endfor"});
        start(segs_[seg_]);
        next();
      }
      finish();
      ++seg_;
      return n;
    }
    if (kw == "set") {
      std::vector<std::string> targets;
      std::string attr;
      do targets.push_back(name()); while (accept(","));
      if (targets.size() == 1 && accept(".")) attr = name();
      if (at_end()) {  // {% set x %}...{% endset %}
        auto n = node(Node::Kind::SetBlock, line);
        n->targets = std::move(targets);
        finish();
        ++seg_;
        n->body = parse_body({"endset"});
        start(segs_[seg_]);
        next();
        finish();
        ++seg_;
        return n;
      }
      auto n = node(Node::Kind::Set, line);
      n->targets = std::move(targets);
      n->attr = attr;
      expect("=");
      n->expr = expression();
      finish();
      ++seg_;
      return n;
    }
    if (kw == "break" || kw == "continue") {
      finish();
      ++seg_;
      return node(kw == "break" ? Node::Kind::Break : Node::Kind::Continue, line);
    }
    if (kw == "macro") {
      auto n = node(Node::Kind::Macro, line);
      n->targets.push_back(name());
      expect("(");
      while (!accept(")")) {
        n->targets.push_back(name());
        n->defaults.push_back(accept("=") ? expression() : nullptr);
        if (!accept(",")) {
          expect(")");
          break;
        }
      }
      finish();
      ++seg_;
      n->body = parse_body({"endmacro"});
      start(segs_[seg_]);
      next();
      finish();
      ++seg_;
      return n;
    }
    error(line, fmt::format("'{{% {} %}}' is not supported", kw));
  }

  // ---- expressions, lowest precedence first (as Jinja2 parses them) ----
  ExprPtr expression(bool allow_ternary = true) {
    ExprPtr e = or_expr();
    if (allow_ternary && peek_name("if")) {
      next();
      auto t = expr(Expr::Kind::Ternary);
      t->b = std::move(e);
      t->a = or_expr();
      if (accept_name("else")) t->c = expression();
      return t;
    }
    return e;
  }
  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (accept_name("or")) e = binary("or", std::move(e), and_expr());
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (accept_name("and")) e = binary("and", std::move(e), not_expr());
    return e;
  }
  ExprPtr not_expr() {
    if (peek_name("not")) {
      auto u = expr(Expr::Kind::Unary);
      next();
      u->name = "not";
      u->a = not_expr();
      return u;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr e = concat();
    for (;;) {
      const Token& t = peek();
      if (t.kind == Token::Op && (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == ">" || t.text == "<=" || t.text == ">=")) {
        const std::string op = next().text;
        e = binary(op, std::move(e), concat());
      } else if (peek_name("in")) {
        next();
        e = binary("in", std::move(e), concat());
      } else if (peek_name("not") && peek(1).kind == Token::Name && peek(1).text == "in") {
        next();
        next();
        e = binary("notin", std::move(e), concat());
      } else {
        return e;
      }
    }
  }
  ExprPtr concat() {
    ExprPtr e = additive();
    while (accept("~")) e = binary("~", std::move(e), additive());
    return e;
  }
  ExprPtr additive() {
    ExprPtr e = multiplicative();
    while (peek_op("+") || peek_op("-")) {
      const std::string op = next().text;
      e = binary(op, std::move(e), multiplicative());
    }
    return e;
  }
  ExprPtr multiplicative() {
    ExprPtr e = power();
    while (peek_op("*") || peek_op("/") || peek_op("//") || peek_op("%")) {
      const std::string op = next().text;
      e = binary(op, std::move(e), power());
    }
    return e;
  }
  ExprPtr power() {
    ExprPtr e = unary();
    while (accept("**")) e = binary("**", std::move(e), unary());
    return e;
  }
  ExprPtr unary() {
    if (peek_op("-") || peek_op("+")) {
      auto u = expr(Expr::Kind::Unary);
      u->name = next().text;
      u->a = unary();
      return u;
    }
    return filtered(postfix(primary()));
  }
  // Filters and tests bind to the operand before them: `x|length - 1` is (x|length) - 1.
  ExprPtr filtered(ExprPtr e) {
    for (;;) {
      if (accept("|")) {
        auto f = expr(Expr::Kind::Filter);
        f->a = std::move(e);
        f->name = name();
        if (accept("(")) arguments(*f);
        e = postfix(std::move(f));
      } else if (peek_name("is")) {
        next();
        auto t = expr(Expr::Kind::Test);
        t->a = std::move(e);
        t->negated = accept_name("not");
        t->name = peek().kind == Token::Name ? next().text : "";
        if (t->name.empty() && accept("==")) t->name = "==";
        if (t->name.empty()) error(peek().line, "expected a test name after 'is'");
        if (accept("(")) {
          arguments(*t);
        } else if (peek().kind != Token::End && peek().kind != Token::Op && !peek_name("and") && !peek_name("or") &&
                   !peek_name("else") && !peek_name("if")) {
          t->items.push_back(postfix(primary()));  // `is sameas x`, `is divisibleby 3`
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }
  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (accept(".")) {
        auto a = expr(Expr::Kind::Attr);
        a->a = std::move(e);
        a->name = peek().kind == Token::Int ? next().text : name();
        e = std::move(a);
      } else if (accept("[")) {
        ExprPtr parts[3];
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!peek_op(":") && !peek_op("]")) parts[k] = expression();
          if (k < 2 && accept(":")) slice = true;
          else break;
        }
        expect("]");
        auto x = expr(slice ? Expr::Kind::Slice : Expr::Kind::Index);
        x->a = std::move(e);
        if (slice) {
          for (auto& p : parts) x->items.push_back(std::move(p));
        } else {
          x->b = std::move(parts[0]);
          if (!x->b) error(x->line, "empty subscript");
        }
        e = std::move(x);
      } else if (accept("(")) {
        auto c = expr(Expr::Kind::Call);
        c->a = std::move(e);
        arguments(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  // After "(": positional and keyword arguments up to ")".
  void arguments(Expr& e) {
    while (!accept(")")) {
      if (peek().kind == Token::Name && peek(1).kind == Token::Op && peek(1).text == "=") {
        std::string key = next().text;
        next();
        e.kwargs.emplace_back(std::move(key), expression());
      } else {
        e.items.push_back(expression());
      }
      if (!accept(",")) {
        expect(")");
        return;
      }
    }
  }
  ExprPtr primary() {
    const Token t = next();
    auto lit = [&](Value v) {
      auto e = expr(Expr::Kind::Literal);
      e->value = std::move(v);
      return e;
    };
    switch (t.kind) {
      case Token::String: {
        std::string s = t.text;
        while (peek().kind == Token::String) s += next().text;  // adjacent literals join
        return lit(Value::string(std::move(s)));
      }
      case Token::Int: return lit(Value::integer(std::stoll(t.text)));
      case Token::Float: return lit(Value::number(std::stod(t.text)));
      case Token::Name:
        if (t.text == "true" || t.text == "True") return lit(Value::boolean(true));
        if (t.text == "false" || t.text == "False") return lit(Value::boolean(false));
        if (t.text == "none" || t.text == "None") return lit(Value::none());
        {
          auto e = expr(Expr::Kind::Name);
          e->name = t.text;
          return e;
        }
      case Token::Op:
        if (t.text == "(") {
          if (accept(")")) return expr(Expr::Kind::Tuple);
          ExprPtr first = expression();
          if (accept(")")) return first;
          auto tup = expr(Expr::Kind::Tuple);
          tup->items.push_back(std::move(first));
          while (accept(",") && !peek_op(")")) tup->items.push_back(expression());
          expect(")");
          return tup;
        }
        if (t.text == "[") {
          auto l = expr(Expr::Kind::List);
          while (!accept("]")) {
            l->items.push_back(expression());
            if (!accept(",")) {
              expect("]");
              break;
            }
          }
          return l;
        }
        if (t.text == "{") {
          auto d = expr(Expr::Kind::Dict);
          while (!accept("}")) {
            d->items.push_back(expression());
            expect(":");
            d->items.push_back(expression());
            if (!accept(",")) {
              expect("}");
              break;
            }
          }
          return d;
        }
        break;
      case Token::End: error(t.line, "expression ends too early");
    }
    error(t.line, fmt::format("unexpected '{}'", t.text));
  }

  // ---- token cursor over the current tag ----
  void start(const Segment& g) {
    toks_ = &g.tokens;
    tok_ = 0;
    tag_line_ = g.line;
  }
  const Token& peek(size_t ahead = 0) const {
    static const Token end_token;
    return tok_ + ahead < toks_->size() ? (*toks_)[tok_ + ahead] : end_token;
  }
  Token next() {
    Token t = peek();
    if (t.kind == Token::End) t.line = tag_line_;
    if (tok_ < toks_->size()) ++tok_;
    return t;
  }
  bool at_end() const { return tok_ >= toks_->size(); }
  bool peek_op(const char* op) const { return peek().kind == Token::Op && peek().text == op; }
  bool peek_name(const char* n) const { return peek().kind == Token::Name && peek().text == n; }
  bool accept(const char* op) {
    if (!peek_op(op)) return false;
    ++tok_;
    return true;
  }
  bool accept_name(const char* n) {
    if (!peek_name(n)) return false;
    ++tok_;
    return true;
  }
  void expect(const char* op) {
    if (!accept(op)) error(line(), fmt::format("expected '{}' but found '{}'", op, peek().text));
  }
  void expect_name(const char* n) {
    if (!accept_name(n)) error(line(), fmt::format("expected '{}' but found '{}'", n, peek().text));
  }
  std::string name() {
    if (peek().kind != Token::Name) error(line(), fmt::format("expected a name but found '{}'", peek().text));
    return next().text;
  }
  void finish() {
    if (!at_end()) error(line(), fmt::format("unexpected '{}'", peek().text));
  }
  int line() const { return at_end() ? tag_line_ : peek().line; }

  ExprPtr expr(Expr::Kind k) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line();
    return e;
  }
  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b) {
    auto e = expr(Expr::Kind::Binary);
    e->name = op;
    e->a = std::move(a);
    e->b = std::move(b);
    return e;
  }
  static NodePtr node(Node::Kind k, int line) {
    auto n = std::make_unique<Node>();
    n->kind = k;
    n->line = line;
    return n;
  }

  std::vector<Segment> segs_;
  size_t seg_ = 0;
  const std::vector<Token>* toks_ = nullptr;
  size_t tok_ = 0;
  int tag_line_ = 0;
};

}  // namespace

Body parse_template(const std::string& source) { return Parser(lex_template(source)).parse_all(); }

}  // namespace moe::jinja
