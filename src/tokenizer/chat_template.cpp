// The template interpreter: walks the tree the parser built, with Jinja2's scoping (a for
// loop body is a scope of its own; if blocks are not; namespaces are how state leaves a
// loop) and Python's operator semantics.
#include "tokenizer/chat_template.h"

#include <cmath>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_builtins.h"

namespace moe {
namespace jinja {
namespace {

enum class Flow { Normal, Break, Continue };

class Interpreter {
 public:
  explicit Interpreter(const Value& context) {
    scopes_.emplace_back();
    for (auto& [k, v] : global_functions()) scopes_.back()[k] = v;
    for (const auto& [k, v] : context.obj->items) scopes_.back()[k] = v;
    scopes_.emplace_back();
  }

  std::string render(const Body& body) {
    std::string out;
    exec(body, out);
    return out;
  }

 private:
  Flow exec(const Body& body, std::string& out) {
    for (const NodePtr& n : body) {
      const Flow f = exec(*n, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec(const Node& n, std::string& out) {
    switch (n.kind) {
      case Node::Kind::Text: out += n.text; return Flow::Normal;
      case Node::Kind::Output: out += to_str(eval(*n.expr)); return Flow::Normal;
      case Node::Kind::If:
        for (const auto& [cond, body] : n.branches)
          if (eval(*cond).truthy()) return exec(body, out);
        return exec(n.else_body, out);
      case Node::Kind::For: return exec_for(n, out);
      case Node::Kind::Set: {
        Value v = eval(*n.expr);
        if (!n.attr.empty()) {
          Value ns = lookup(n.targets[0]);
          if (!ns.is_object() || !ns.obj->is_namespace)
            runtime_error(n.line, fmt::format("cannot set '{}.{}': '{}' is not a namespace", n.targets[0], n.attr, n.targets[0]));
          ns.obj->set(n.attr, std::move(v));
        } else {
          assign(n.targets, v, n.line);
        }
        return Flow::Normal;
      }
      case Node::Kind::SetBlock: {
        std::string captured;
        exec(n.body, captured);
        assign(n.targets, Value::string(captured), n.line);
        return Flow::Normal;
      }
      case Node::Kind::Break: return Flow::Break;
      case Node::Kind::Continue: return Flow::Continue;
      case Node::Kind::Macro: define_macro(n); return Flow::Normal;
    }
    return Flow::Normal;
  }

  Flow exec_for(const Node& n, std::string& out) {
    const Value seq = eval(*n.expr);
    Array items;
    if (seq.is_array()) items = *seq.arr;
    else if (seq.is_object()) for (const auto& [k, _] : seq.obj->items) items.push_back(Value::string(k));
    else if (seq.is_string()) for (std::string& cp : code_points(seq.s)) items.push_back(Value::string(std::move(cp)));
    else if (!seq.is_undefined() && !seq.is_none()) runtime_error(n.line, fmt::format("'{}' object is not iterable", seq.type_name()));
    else if (seq.is_none()) runtime_error(n.line, "'NoneType' object is not iterable");
    if (n.cond) {  // the filter runs before the loop, so loop.length counts what passes
      Array kept;
      for (const Value& item : items) {
        scopes_.emplace_back();
        assign(n.targets, item, n.line);
        if (eval(*n.cond).truthy()) kept.push_back(item);
        scopes_.pop_back();
      }
      items.swap(kept);
    }
    const int64_t len = int64_t(items.size());
    for (int64_t i = 0; i < len; ++i) {
      Value loop = Value::object();
      loop.obj->set("index", Value::integer(i + 1));
      loop.obj->set("index0", Value::integer(i));
      loop.obj->set("revindex", Value::integer(len - i));
      loop.obj->set("revindex0", Value::integer(len - i - 1));
      loop.obj->set("first", Value::boolean(i == 0));
      loop.obj->set("last", Value::boolean(i == len - 1));
      loop.obj->set("length", Value::integer(len));
      loop.obj->set("previtem", i > 0 ? items[size_t(i - 1)] : Value());
      loop.obj->set("nextitem", i + 1 < len ? items[size_t(i + 1)] : Value());
      loop.obj->set("cycle", Value::function([i](std::vector<Value>& args, Kwargs&) {
        if (args.empty()) throw CallError("loop.cycle() needs arguments");
        return args[size_t(i) % args.size()];
      }));
      scopes_.emplace_back();
      scopes_.back()["loop"] = loop;
      assign(n.targets, items[size_t(i)], n.line);
      const Flow f = exec(n.body, out);
      scopes_.pop_back();
      if (f == Flow::Break) break;
    }
    if (len == 0) return exec(n.else_body, out);
    return Flow::Normal;
  }

  void define_macro(const Node& n) {
    const Node* node = &n;
    scopes_.back()[n.targets[0]] = Value::function([this, node](std::vector<Value>& args, Kwargs& kwargs) {
      scopes_.emplace_back();
      for (size_t p = 1; p < node->targets.size(); ++p) {
        const std::string& param = node->targets[p];
        Value v;
        if (p - 1 < args.size()) v = args[p - 1];
        for (const auto& [k, kv] : kwargs)
          if (k == param) v = kv;
        if (v.is_undefined() && node->defaults[p - 1]) v = eval(*node->defaults[p - 1]);
        scopes_.back()[param] = v;
      }
      std::string out;
      exec(node->body, out);
      scopes_.pop_back();
      return Value::string(out);
    });
  }

  void assign(const std::vector<std::string>& targets, const Value& v, int line) {
    if (targets.size() == 1) {
      scopes_.back()[targets[0]] = v;
      return;
    }
    if (!v.is_array() || v.arr->size() != targets.size())
      runtime_error(line, fmt::format("cannot unpack '{}' into {} names", to_repr(v), targets.size()));
    for (size_t k = 0; k < targets.size(); ++k) scopes_.back()[targets[k]] = (*v.arr)[k];
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (auto f = it->find(name); f != it->end()) return f->second;
    return Value();
  }

  Value eval(const Expr& e) {
    using K = Expr::Kind;
    switch (e.kind) {
      case K::Literal: return e.value;
      case K::Name: return lookup(e.name);
      case K::List:
      case K::Tuple: {
        Value out = Value::array();
        for (const ExprPtr& x : e.items) out.arr->push_back(eval(*x));
        return out;
      }
      case K::Dict: {
        Value out = Value::object();
        for (size_t k = 0; k + 1 < e.items.size(); k += 2) out.obj->set(to_str(eval(*e.items[k])), eval(*e.items[k + 1]));
        return out;
      }
      case K::Attr: return get_attr(eval(*e.a), e.name, e.line, *e.a);
      case K::Index: return get_item(eval(*e.a), eval(*e.b), e.line, *e.a);
      case K::Slice: {
        const Value v = eval(*e.a);
        Value parts[3];
        for (int k = 0; k < 3; ++k)
          if (e.items[size_t(k)]) parts[k] = eval(*e.items[size_t(k)]);
        if (v.is_array()) {
          Value out = Value::array();
          for (int64_t i : slice_indices(parts[0], parts[1], parts[2], int64_t(v.arr->size()), e.line)) out.arr->push_back((*v.arr)[size_t(i)]);
          return out;
        }
        if (v.is_string()) {
          const std::vector<std::string> cps = code_points(v.s);
          std::string out;
          for (int64_t i : slice_indices(parts[0], parts[1], parts[2], int64_t(cps.size()), e.line)) out += cps[size_t(i)];
          return Value::string(out);
        }
        runtime_error(e.line, fmt::format("'{}' object cannot be sliced", v.type_name()));
      }
      case K::Call: {
        const Value f = eval(*e.a);
        if (f.kind != Value::Kind::Function) runtime_error(e.line, fmt::format("'{}' is not callable", describe(*e.a)));
        std::vector<Value> args;
        for (const ExprPtr& x : e.items) args.push_back(eval(*x));
        Kwargs kwargs;
        for (const auto& [k, x] : e.kwargs) kwargs.emplace_back(k, eval(*x));
        try {
          return (*f.fn)(args, kwargs);
        } catch (const CallError& err) {
          runtime_error(e.line, err.what());
        }
      }
      case K::Filter: {
        const Value in = eval(*e.a);
        std::vector<Value> args;
        for (const ExprPtr& x : e.items) args.push_back(eval(*x));
        Kwargs kwargs;
        for (const auto& [k, x] : e.kwargs) kwargs.emplace_back(k, eval(*x));
        return apply_filter(e.name, in, args, kwargs, e.line);
      }
      case K::Test: {
        const Value v = eval(*e.a);
        std::vector<Value> args;
        for (const ExprPtr& x : e.items) args.push_back(eval(*x));
        return Value::boolean(apply_test(e.name, v, args, e.line) != e.negated);
      }
      case K::Unary: {
        const Value v = eval(*e.a);
        if (e.name == "not") return Value::boolean(!v.truthy());
        if (v.kind == Value::Kind::Int) return Value::integer(e.name == "-" ? -v.i : v.i);
        if (v.kind == Value::Kind::Float) return Value::number(e.name == "-" ? -v.f : v.f);
        runtime_error(e.line, fmt::format("bad operand type for unary {}: '{}'", e.name, v.type_name()));
      }
      case K::Binary: return binary(e);
      case K::Ternary: return eval(*e.a).truthy() ? eval(*e.b) : (e.c ? eval(*e.c) : Value());
    }
    return Value();
  }

  // The source of an expression, roughly, for error messages ("message.content").
  static std::string describe(const Expr& e) {
    if (e.kind == Expr::Kind::Name) return e.name;
    if (e.kind == Expr::Kind::Attr) return describe(*e.a) + "." + e.name;
    if (e.kind == Expr::Kind::Index) return describe(*e.a) + "[...]";
    return "expression";
  }

  Value get_attr(const Value& obj, const std::string& name, int line, const Expr& src) {
    if (obj.is_undefined()) runtime_error(line, fmt::format("'{}' is undefined (reading .{})", describe(src), name));
    if (Value m = method(obj, name, line); !m.is_undefined()) return m;
    if (obj.is_object()) {
      const Value* v = obj.obj->find(name);
      return v ? *v : Value();
    }
    if (obj.is_array() && !name.empty() && std::isdigit(uint8_t(name[0]))) return get_item(obj, Value::integer(std::stoll(name)), line, src);
    return Value();
  }

  Value get_item(const Value& obj, const Value& key, int line, const Expr& src) {
    if (obj.is_undefined()) runtime_error(line, fmt::format("'{}' is undefined (reading [{}])", describe(src), to_repr(key)));
    if (obj.is_object()) {
      const Value* v = obj.obj->find(to_str(key));
      if (v) return *v;
      return key.is_string() ? method(obj, key.s, line) : Value();
    }
    if ((obj.is_array() || obj.is_string()) && key.kind == Value::Kind::Int) {
      int64_t i = key.i;
      if (obj.is_array()) return normalize_index(i, int64_t(obj.arr->size())) ? (*obj.arr)[size_t(i)] : Value();
      const std::vector<std::string> cps = code_points(obj.s);
      return normalize_index(i, int64_t(cps.size())) ? Value::string(cps[size_t(i)]) : Value();
    }
    if (key.is_string()) return get_attr(obj, key.s, line, src);
    return Value();
  }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value a = eval(*e.a);
      return a.truthy() ? eval(*e.b) : a;
    }
    if (op == "or") {
      Value a = eval(*e.a);
      return a.truthy() ? a : eval(*e.b);
    }
    const Value a = eval(*e.a), b = eval(*e.b);
    if (op == "==") return Value::boolean(equal(a, b));
    if (op == "!=") return Value::boolean(!equal(a, b));
    if (op == "in" || op == "notin") {
      std::vector<Value> args{b};
      if (!b.is_string() && !b.is_array() && !b.is_object())
        runtime_error(e.line, fmt::format("argument of type '{}' is not iterable", b.type_name()));
      return Value::boolean(apply_test("in", a, args, e.line) == (op == "in"));
    }
    if (op == "~") return Value::string(to_str(a) + to_str(b));
    auto type_error = [&]() -> Value {
      runtime_error(e.line, fmt::format("unsupported operand types for {}: '{}' and '{}'", op, a.type_name(), b.type_name()));
    };
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int c;
      if (a.is_number() && b.is_number()) c = a.as_double() < b.as_double() ? -1 : a.as_double() > b.as_double();
      else if (a.is_string() && b.is_string()) c = a.s.compare(b.s);
      else return type_error();
      return Value::boolean(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
    }
    if (op == "+") {
      if (a.is_string() && b.is_string()) return Value::string(a.s + b.s);
      if (a.is_array() && b.is_array()) {
        Value out = Value::array(*a.arr);
        out.arr->insert(out.arr->end(), b.arr->begin(), b.arr->end());
        return out;
      }
    }
    if (op == "*" && a.is_string() && b.kind == Value::Kind::Int) {
      std::string out;
      for (int64_t k = 0; k < b.i; ++k) out += a.s;
      return Value::string(out);
    }
    if (!a.is_number() || !b.is_number()) return type_error();
    const bool ints = a.kind == Value::Kind::Int && b.kind == Value::Kind::Int;
    const double x = a.as_double(), y = b.as_double();
    if ((op == "/" || op == "//" || op == "%") && y == 0) runtime_error(e.line, "division by zero");
    if (op == "+") return ints ? Value::integer(a.i + b.i) : Value::number(x + y);
    if (op == "-") return ints ? Value::integer(a.i - b.i) : Value::number(x - y);
    if (op == "*") return ints ? Value::integer(a.i * b.i) : Value::number(x * y);
    if (op == "/") return Value::number(x / y);
    if (op == "//") return ints ? Value::integer(int64_t(std::floor(x / y))) : Value::number(std::floor(x / y));
    if (op == "%") {
      const double m = x - y * std::floor(x / y);  // Python's sign follows the divisor
      return ints ? Value::integer(int64_t(m)) : Value::number(m);
    }
    if (op == "**") return ints && b.i >= 0 ? Value::integer(int64_t(std::pow(x, y))) : Value::number(std::pow(x, y));
    return type_error();
  }

  std::vector<std::unordered_map<std::string, Value>> scopes_;
};

}  // namespace
}  // namespace jinja

ChatTemplate::ChatTemplate(const std::string& source) : body_(std::make_unique<jinja::Body>(jinja::parse_template(source))) {}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  if (!context.is_object()) fail("chat template context must be a JSON object");
  jinja::Interpreter interp(jinja::from_json(context));
  return interp.render(*body_);
}

nlohmann::ordered_json chat_context(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                    const std::string& bos_token, const std::string& eos_token,
                                    const nlohmann::ordered_json& extra) {
  nlohmann::ordered_json c = nlohmann::ordered_json::object();
  c["messages"] = messages;
  c["add_generation_prompt"] = add_generation_prompt;
  if (!bos_token.empty()) c["bos_token"] = bos_token;
  if (!eos_token.empty()) c["eos_token"] = eos_token;
  for (const auto& [k, v] : extra.items()) c[k] = v;
  return c;
}

}  // namespace moe
