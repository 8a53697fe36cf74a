#include "tokenizer/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace moe::jinja {

void runtime_error(int line, const std::string& msg) { fail("chat template line {}: {}", line, msg); }

std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const size_t len = std::max<size_t>(1, utf8_sequence_length(s, i));
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
}

bool normalize_index(int64_t& i, int64_t n) {
  if (i < 0) i += n;
  return i >= 0 && i < n;
}

std::vector<int64_t> slice_indices(const Value& start, const Value& stop, const Value& step, int64_t n, int line) {
  auto num = [&](const Value& v, const char* what) {
    if (v.kind != Value::Kind::Int) runtime_error(line, fmt::format("slice {} must be an integer", what));
    return v.i;
  };
  const int64_t st = step.is_undefined() || step.is_none() ? 1 : num(step, "step");
  if (st == 0) runtime_error(line, "slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t fallback) {
    if (v.is_undefined() || v.is_none()) return fallback;
    int64_t x = num(v, "bound");
    if (x < 0) x += n;
    return st > 0 ? std::clamp<int64_t>(x, 0, n) : std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t b = clamp(start, st > 0 ? 0 : n - 1), e = clamp(stop, st > 0 ? n : -1);
  std::vector<int64_t> out;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(i);
  return out;
}

bool py_space(const std::string& cp) {
  if (cp.size() == 1) return cp[0] == ' ' || (cp[0] >= '\t' && cp[0] <= '\r') || (cp[0] >= 0x1c && cp[0] <= 0x1f);
  static const char* const spaces[] = {"\xc2\x85", "\xc2\xa0", "\xe1\x9a\x80", "\xe2\x80\xa8", "\xe2\x80\xa9",
                                       "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80"};
  for (const char* s : spaces)
    if (cp == s) return true;
  return cp.size() == 3 && uint8_t(cp[0]) == 0xe2 && uint8_t(cp[1]) == 0x80 && uint8_t(cp[2]) <= 0x8a;
}

// str.strip / lstrip / rstrip: whitespace, or any of the code points in `chars`.
std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::vector<std::string> cps = code_points(s);
  std::vector<std::string> set;
  const bool ws = chars.is_undefined() || chars.is_none();
  if (!ws) set = code_points(chars.s);
  auto drop = [&](const std::string& cp) { return ws ? py_space(cp) : std::find(set.begin(), set.end(), cp) != set.end(); };
  size_t b = 0, e = cps.size();
  while (left && b < e && drop(cps[b])) ++b;
  while (right && e > b && drop(cps[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out += cps[i];
  return out;
}

std::vector<std::string> split(const std::string& s, const Value& sep, int64_t maxsplit, int line) {
  std::vector<std::string> out;
  if (sep.is_undefined() || sep.is_none()) {  // runs of whitespace, no empty parts
    const std::vector<std::string> cps = code_points(s);
    std::string cur;
    bool in_word = false;
    for (size_t i = 0; i < cps.size(); ++i) {
      if (py_space(cps[i]) && (maxsplit < 0 || int64_t(out.size()) < maxsplit)) {
        if (in_word) out.push_back(cur);
        cur.clear();
        in_word = false;
      } else {
        if (!in_word && !out.empty() && maxsplit >= 0 && int64_t(out.size()) >= maxsplit) {
          for (size_t k = i; k < cps.size(); ++k) cur += cps[k];
          out.push_back(strip(cur, Value(), false, true));
          return out;
        }
        cur += cps[i];
        in_word = true;
      }
    }
    if (in_word) out.push_back(cur);
    return out;
  }
  if (!sep.is_string() || sep.s.empty()) runtime_error(line, "split() separator must be a non-empty string");
  size_t pos = 0;
  for (size_t at; (maxsplit < 0 || int64_t(out.size()) < maxsplit) && (at = s.find(sep.s, pos)) != std::string::npos;) {
    out.push_back(s.substr(pos, at - pos));
    pos = at + sep.s.size();
  }
  out.push_back(s.substr(pos));
  return out;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) return s;
  size_t pos = 0;
  for (int64_t n = 0; (count < 0 || n < count) && (pos = s.find(from, pos)) != std::string::npos; ++n) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

std::string ascii_case(std::string s, bool upper) {
  for (char& c : s) c = char(upper ? std::toupper(uint8_t(c)) : std::tolower(uint8_t(c)));
  return s;
}

std::string title(const std::string& s) {
  std::string out;
  bool prev_alpha = false;
  for (char c : s) {
    const bool alpha = std::isalpha(uint8_t(c));
    out += char(alpha ? (prev_alpha ? std::tolower(uint8_t(c)) : std::toupper(uint8_t(c))) : c);
    prev_alpha = alpha;
  }
  return out;
}

namespace {

const Value& arg(std::vector<Value>& args, Kwargs& kwargs, size_t i, const char* name) {
  static const Value undefined;
  for (const auto& [k, v] : kwargs)
    if (k == name) return v;
  return i < args.size() ? args[i] : undefined;
}

Value attribute(const Value& v, const std::string& path) {
  Value cur = v;
  size_t pos = 0;
  while (pos <= path.size()) {
    const size_t dot = path.find('.', pos);
    const std::string key = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (!cur.is_object()) return Value();
    const Value* next = cur.obj->find(key);
    if (!next) return Value();
    cur = *next;
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return cur;
}

Value as_array(const Value& v, int line) {
  if (v.is_array()) return v;
  Value out = Value::array();
  if (v.is_string()) {
    for (std::string& cp : code_points(v.s)) out.arr->push_back(Value::string(std::move(cp)));
  } else if (v.is_object()) {
    for (const auto& [k, _] : v.obj->items) out.arr->push_back(Value::string(k));
  } else if (!v.is_undefined()) {
    runtime_error(line, fmt::format("'{}' object is not iterable", v.type_name()));
  }
  return out;
}

bool less(const Value& a, const Value& b, int line) {
  if (a.is_number() && b.is_number()) return a.as_double() < b.as_double();
  if (a.is_string() && b.is_string()) return a.s < b.s;
  runtime_error(line, fmt::format("cannot compare '{}' and '{}'", a.type_name(), b.type_name()));
}

Value select(const Value& input, std::vector<Value>& args, int line, bool by_attr, bool keep) {
  Value out = Value::array();
  const Value seq = as_array(input, line);
  const std::string attr = by_attr && !args.empty() ? to_str(args[0]) : "";
  const size_t test_at = by_attr ? 1 : 0;
  std::vector<Value> test_args(args.begin() + std::ptrdiff_t(std::min(args.size(), test_at + 1)), args.end());
  for (const Value& item : *seq.arr) {
    const Value subject = by_attr ? attribute(item, attr) : item;
    const bool pass = args.size() > test_at ? apply_test(to_str(args[test_at]), subject, test_args, line) : subject.truthy();
    if (pass == keep) out.arr->push_back(item);
  }
  return out;
}

}  // namespace

Value apply_filter(const std::string& name, const Value& in, std::vector<Value>& args, Kwargs& kw, int line) {
  auto need_string = [&] {
    if (!in.is_string()) runtime_error(line, fmt::format("filter '{}' needs a string, not '{}'", name, in.type_name()));
  };
  if (name == "length" || name == "count") {
    if (in.is_string()) return Value::integer(int64_t(code_points(in.s).size()));
    if (in.is_array()) return Value::integer(int64_t(in.arr->size()));
    if (in.is_object()) return Value::integer(int64_t(in.obj->items.size()));
    runtime_error(line, fmt::format("object of type '{}' has no length", in.type_name()));
  }
  if (name == "tojson") {
    const Value& indent = arg(args, kw, 0, "indent");
    return Value::string(to_json(in, indent.kind == Value::Kind::Int ? int(indent.i) : -1));
  }
  if (name == "string") return Value::string(to_str(in));
  if (name == "safe" || name == "e" || name == "escape") {
    if (name == "safe") return in;
    std::string out;
    for (char c : to_str(in)) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&#34;"; break;
        case '\'': out += "&#39;"; break;
        default: out += c;
      }
    }
    return Value::string(out);
  }
  if (name == "default" || name == "d") {
    const bool boolean = arg(args, kw, 1, "boolean").truthy();
    const bool use_default = in.is_undefined() || (boolean && !in.truthy());
    return use_default ? arg(args, kw, 0, "default_value") : in;
  }
  if (name == "trim") return need_string(), Value::string(strip(in.s, arg(args, kw, 0, "chars"), true, true));
  if (name == "upper") return need_string(), Value::string(ascii_case(in.s, true));
  if (name == "lower") return need_string(), Value::string(ascii_case(in.s, false));
  if (name == "title") return need_string(), Value::string(title(in.s));
  if (name == "capitalize") {
    need_string();
    std::string s = ascii_case(in.s, false);
    if (!s.empty()) s[0] = char(std::toupper(uint8_t(s[0])));
    return Value::string(s);
  }
  if (name == "replace") {
    need_string();
    const Value& count = arg(args, kw, 2, "count");
    return Value::string(replace_all(in.s, to_str(arg(args, kw, 0, "old")), to_str(arg(args, kw, 1, "new")),
                                     count.kind == Value::Kind::Int ? count.i : -1));
  }
  if (name == "join") {
    const Value seq = as_array(in, line);
    const std::string sep = to_str(arg(args, kw, 0, "d"));
    const Value& attr = arg(args, kw, 1, "attribute");
    std::string out;
    for (size_t k = 0; k < seq.arr->size(); ++k)
      out += (k ? sep : "") + to_str(attr.is_undefined() ? (*seq.arr)[k] : attribute((*seq.arr)[k], to_str(attr)));
    return Value::string(out);
  }
  if (name == "first" || name == "last") {
    const Value seq = as_array(in, line);
    if (seq.arr->empty()) return Value();
    return name == "first" ? seq.arr->front() : seq.arr->back();
  }
  if (name == "list") return as_array(in, line);
  if (name == "reverse") {
    if (in.is_string()) {
      std::vector<std::string> cps = code_points(in.s);
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
      return Value::string(out);
    }
    Value seq = Value::array(*as_array(in, line).arr);
    std::reverse(seq.arr->begin(), seq.arr->end());
    return seq;
  }
  if (name == "items") {
    if (!in.is_object()) runtime_error(line, fmt::format("filter 'items' needs a dict, not '{}'", in.type_name()));
    Value out = Value::array();
    for (const auto& [k, v] : in.obj->items) out.arr->push_back(Value::array({Value::string(k), v}));
    return out;
  }
  if (name == "int") {
    if (in.is_number()) return Value::integer(int64_t(in.as_double()));
    if (in.is_string()) {
      try {
        return Value::integer(std::stoll(in.s));
      } catch (const std::exception&) {
      }
    }
    return Value::integer(0);
  }
  if (name == "float") {
    if (in.is_number()) return Value::number(in.as_double());
    try {
      return Value::number(in.is_string() ? std::stod(in.s) : 0.0);
    } catch (const std::exception&) {
      return Value::number(0.0);
    }
  }
  if (name == "abs") {
    if (in.kind == Value::Kind::Int) return Value::integer(in.i < 0 ? -in.i : in.i);
    if (in.is_number()) return Value::number(std::fabs(in.f));
    runtime_error(line, "filter 'abs' needs a number");
  }
  if (name == "selectattr" || name == "rejectattr") return select(in, args, line, true, name == "selectattr");
  if (name == "select" || name == "reject") return select(in, args, line, false, name == "select");
  if (name == "map") {
    const Value seq = as_array(in, line);
    Value out = Value::array();
    const Value& attr = arg(args, kw, 99, "attribute");
    for (const Value& item : *seq.arr) {
      if (!attr.is_undefined()) {
        out.arr->push_back(attribute(item, to_str(attr)));
      } else if (!args.empty()) {
        std::vector<Value> rest(args.begin() + 1, args.end());
        Kwargs none;
        out.arr->push_back(apply_filter(to_str(args[0]), item, rest, none, line));
      } else {
        runtime_error(line, "filter 'map' needs a filter name or attribute=");
      }
    }
    return out;
  }
  if (name == "unique") {
    Value out = Value::array();
    for (const Value& item : *as_array(in, line).arr)
      if (std::none_of(out.arr->begin(), out.arr->end(), [&](const Value& o) { return equal(o, item); }))
        out.arr->push_back(item);
    return out;
  }
  if (name == "sort") {
    Value out = Value::array(*as_array(in, line).arr);
    const Value& attr = arg(args, kw, 2, "attribute");
    const bool reverse = arg(args, kw, 0, "reverse").truthy();
    std::stable_sort(out.arr->begin(), out.arr->end(), [&](const Value& a, const Value& b) {
      const Value x = attr.is_undefined() ? a : attribute(a, to_str(attr));
      const Value y = attr.is_undefined() ? b : attribute(b, to_str(attr));
      return reverse ? less(y, x, line) : less(x, y, line);
    });
    return out;
  }
  if (name == "indent") {
    need_string();
    const Value& width = arg(args, kw, 0, "width");
    const std::string pad = width.is_string() ? width.s : std::string(size_t(width.kind == Value::Kind::Int ? width.i : 4), ' ');
    const bool first = arg(args, kw, 1, "first").truthy();
    std::string out = first ? pad : "";
    for (char c : in.s) {
      out += c;
      if (c == '\n') out += pad;
    }
    return Value::string(out);
  }
  runtime_error(line, fmt::format("filter '{}' is not supported", name));
}

bool apply_test(const std::string& name, const Value& v, std::vector<Value>& args, int line) {
  using K = Value::Kind;
  auto other = [&]() -> const Value& {
    if (args.empty()) runtime_error(line, fmt::format("test '{}' needs an argument", name));
    return args[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == K::Int;
  if (name == "float") return v.kind == K::Float;
  if (name == "boolean") return v.kind == K::Bool;
  if (name == "true") return v.kind == K::Bool && v.b;
  if (name == "false") return v.kind == K::Bool && !v.b;
  if (name == "mapping") return v.is_object();
  if (name == "sequence") return v.is_array() || v.is_string() || v.is_object();
  if (name == "iterable") return v.is_array() || v.is_string() || v.is_object();
  if (name == "callable") return v.kind == K::Function;
  if (name == "odd" || name == "even") {
    if (v.kind != K::Int) runtime_error(line, fmt::format("test '{}' needs an integer", name));
    return (v.i % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") return v.kind == K::Int && other().kind == K::Int && other().i != 0 && v.i % other().i == 0;
  if (name == "eq" || name == "equalto" || name == "==") return equal(v, other());
  if (name == "ne" || name == "!=") return !equal(v, other());
  if (name == "sameas") return equal(v, other()) && v.kind == other().kind;
  if (name == "lower") return v.is_string() && ascii_case(v.s, false) == v.s;
  if (name == "upper") return v.is_string() && ascii_case(v.s, true) == v.s;
  if (name == "in") {
    const Value& c = other();
    if (c.is_string()) return v.is_string() && c.s.find(v.s) != std::string::npos;
    if (c.is_array()) return std::any_of(c.arr->begin(), c.arr->end(), [&](const Value& x) { return equal(x, v); });
    if (c.is_object()) return v.is_string() && c.obj->find(v.s);
    return false;
  }
  runtime_error(line, fmt::format("test '{}' is not supported", name));
}

}  // namespace moe::jinja
