// Methods of str, list and dict values (`content.startswith('<')`, `d.items()`) and the
// global functions templates call, each with Python's behaviour.
#include <algorithm>
#include <chrono>
#include <ctime>

#include <fmt/format.h>

#include "tokenizer/jinja_builtins.h"

namespace moe::jinja {
namespace {

const Value& positional(std::vector<Value>& args, size_t i) {
  static const Value undefined;
  return i < args.size() ? args[i] : undefined;
}

int64_t int_arg(std::vector<Value>& args, size_t i, int64_t fallback) {
  const Value& v = positional(args, i);
  return v.kind == Value::Kind::Int ? v.i : fallback;
}

std::string str_arg(std::vector<Value>& args, size_t i, const std::string& method, int line) {
  const Value& v = positional(args, i);
  if (!v.is_string()) runtime_error(line, fmt::format("{}() needs a string argument", method));
  return v.s;
}

// str.startswith / endswith accept one string or a tuple of them.
bool affix(const std::string& s, const Value& what, bool prefix, int line) {
  auto one = [&](const Value& v) {
    if (!v.is_string()) runtime_error(line, "startswith()/endswith() need a string");
    if (v.s.size() > s.size()) return false;
    return prefix ? s.compare(0, v.s.size(), v.s) == 0 : s.compare(s.size() - v.s.size(), v.s.size(), v.s) == 0;
  };
  if (what.is_array()) return std::any_of(what.arr->begin(), what.arr->end(), one);
  return one(what);
}

Value string_method(const Value& self, const std::string& name, std::vector<Value>& args, int line) {
  const std::string& s = self.s;
  if (name == "startswith" || name == "endswith") return Value::boolean(affix(s, positional(args, 0), name == "startswith", line));
  if (name == "strip") return Value::string(strip(s, positional(args, 0), true, true));
  if (name == "lstrip") return Value::string(strip(s, positional(args, 0), true, false));
  if (name == "rstrip") return Value::string(strip(s, positional(args, 0), false, true));
  if (name == "split") {
    Value out = Value::array();
    for (std::string& part : split(s, positional(args, 0), int_arg(args, 1, -1), line)) out.arr->push_back(Value::string(std::move(part)));
    return out;
  }
  if (name == "replace")
    return Value::string(replace_all(s, str_arg(args, 0, name, line), str_arg(args, 1, name, line), int_arg(args, 2, -1)));
  if (name == "upper" || name == "lower") return Value::string(ascii_case(s, name == "upper"));
  if (name == "title") return Value::string(title(s));
  if (name == "capitalize") {
    std::string out = ascii_case(s, false);
    if (!out.empty()) out[0] = char(std::toupper(uint8_t(out[0])));
    return Value::string(out);
  }
  if (name == "find" || name == "count") {
    const std::string sub = str_arg(args, 0, name, line);
    if (name == "find") {
      const size_t at = s.find(sub);
      return Value::integer(at == std::string::npos ? -1 : int64_t(code_points(s.substr(0, at)).size()));
    }
    int64_t n = 0;
    for (size_t at = s.find(sub); !sub.empty() && at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
    return Value::integer(n);
  }
  if (name == "join") {
    const Value& seq = positional(args, 0);
    if (!seq.is_array()) runtime_error(line, "join() needs a list");
    std::string out;
    for (size_t k = 0; k < seq.arr->size(); ++k) out += (k ? s : "") + to_str((*seq.arr)[k]);
    return Value::string(out);
  }
  if (name == "splitlines") {
    Value out = Value::array();
    std::string cur;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        out.arr->push_back(Value::string(cur));
        cur.clear();
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      } else {
        cur += s[i];
      }
    }
    if (!cur.empty()) out.arr->push_back(Value::string(cur));
    return out;
  }
  if (name == "format") {
    std::string out;
    size_t next = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s.compare(i, 2, "{}") == 0) {
        out += to_str(positional(args, next++));
        ++i;
      } else {
        out += s[i];
      }
    }
    return Value::string(out);
  }
  runtime_error(line, fmt::format("str method '{}' is not supported", name));
}

Value list_method(const Value& self, const std::string& name, std::vector<Value>& args, int line) {
  if (name == "append") {
    self.arr->push_back(positional(args, 0));
    return Value::none();
  }
  if (name == "pop") {
    if (self.arr->empty()) runtime_error(line, "pop from empty list");
    int64_t i = int_arg(args, 0, -1);
    if (!normalize_index(i, int64_t(self.arr->size()))) runtime_error(line, "pop index out of range");
    Value v = (*self.arr)[size_t(i)];
    self.arr->erase(self.arr->begin() + i);
    return v;
  }
  if (name == "index") {
    for (size_t k = 0; k < self.arr->size(); ++k)
      if (equal((*self.arr)[k], positional(args, 0))) return Value::integer(int64_t(k));
    runtime_error(line, "index(): value is not in list");
  }
  runtime_error(line, fmt::format("list method '{}' is not supported", name));
}

Value dict_method(const Value& self, const std::string& name, std::vector<Value>& args, int line) {
  if (name == "items" || name == "keys" || name == "values") {
    Value out = Value::array();
    for (const auto& [k, v] : self.obj->items) {
      if (name == "items") out.arr->push_back(Value::array({Value::string(k), v}));
      else out.arr->push_back(name == "keys" ? Value::string(k) : v);
    }
    return out;
  }
  if (name == "get") {
    const Value* v = self.obj->find(to_str(positional(args, 0)));
    return v ? *v : (args.size() > 1 ? args[1] : Value::none());
  }
  runtime_error(line, fmt::format("dict method '{}' is not supported", name));
}

bool has_method(const Value& obj, const std::string& name) {
  static const char* const str_methods[] = {"startswith", "endswith", "strip", "lstrip", "rstrip", "split", "replace", "upper",
                                            "lower", "title", "capitalize", "find", "count", "join", "splitlines", "format"};
  static const char* const list_methods[] = {"append", "pop", "index"};
  static const char* const dict_methods[] = {"items", "keys", "values", "get"};
  auto in = [&](const auto& list) { return std::find(std::begin(list), std::end(list), name) != std::end(list); };
  if (obj.is_string()) return in(str_methods);
  if (obj.is_array()) return in(list_methods);
  if (obj.is_object() && !obj.obj->is_namespace) return in(dict_methods);
  return false;
}

}  // namespace

Value method(const Value& obj, const std::string& name, int line) {
  if (!has_method(obj, name)) return Value();
  return Value::function([obj, name, line](std::vector<Value>& args, Kwargs&) {
    if (obj.is_string()) return string_method(obj, name, args, line);
    if (obj.is_array()) return list_method(obj, name, args, line);
    return dict_method(obj, name, args, line);
  });
}

Kwargs global_functions() {
  Kwargs g;
  g.emplace_back("range", Value::function([](std::vector<Value>& args, Kwargs&) {
    for (const Value& a : args)
      if (a.kind != Value::Kind::Int) throw CallError("range() needs integer arguments");
    const int64_t start = args.size() > 1 ? args[0].i : 0;
    const int64_t stop = args.size() > 1 ? args[1].i : (args.empty() ? 0 : args[0].i);
    const int64_t step = args.size() > 2 ? args[2].i : 1;
    if (step == 0) throw CallError("range() step must not be zero");
    Value out = Value::array();
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.arr->push_back(Value::integer(i));
    return out;
  }));
  auto make_object = [](bool ns) {
    return Value::function([ns](std::vector<Value>& args, Kwargs& kwargs) {
      Value o = Value::object(ns);
      if (!args.empty() && args[0].is_object())
        for (const auto& [k, v] : args[0].obj->items) o.obj->set(k, v);
      for (const auto& [k, v] : kwargs) o.obj->set(k, v);
      return o;
    });
  };
  g.emplace_back("namespace", make_object(true));
  g.emplace_back("dict", make_object(false));
  g.emplace_back("raise_exception", Value::function([](std::vector<Value>& args, Kwargs&) -> Value {
    throw CallError("the template raised an exception: " + (args.empty() ? std::string() : to_str(args[0])));
  }));
  g.emplace_back("strftime_now", Value::function([](std::vector<Value>& args, Kwargs&) {
    const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    const std::string fmt = args.empty() ? "%Y-%m-%d" : to_str(args[0]);
    const size_t n = std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
    return Value::string(std::string(buf, n));
  }));
  return g;
}

}  // namespace moe::jinja
