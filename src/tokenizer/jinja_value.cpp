#include "tokenizer/jinja_value.h"

#include <cmath>
#include <fmt/format.h>

namespace moe::jinja {

Value Value::array(Array v) {
  Value x = make(Kind::Array);
  x.arr = std::make_shared<Array>(std::move(v));
  return x;
}

Value Value::object(bool is_namespace) {
  Value x = make(Kind::Object);
  x.obj = std::make_shared<Object>();
  x.obj->is_namespace = is_namespace;
  return x;
}

Value Value::function(Function f) {
  Value x = make(Kind::Function);
  x.fn = std::make_shared<Function>(std::move(f));
  return x;
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return b;
    case Kind::Int: return i != 0;
    case Kind::Float: return f != 0;
    case Kind::String: return !s.empty();
    case Kind::Array: return !arr->empty();
    case Kind::Object: return obj->is_namespace || !obj->items.empty();
    case Kind::Function: return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind) {
    case Kind::Undefined: return "undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::Array: return "list";
    case Kind::Object: return obj->is_namespace ? "Namespace" : "dict";
    case Kind::Function: return "function";
  }
  return "?";
}

const Value* Object::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Object::set(const std::string& key, Value v) {
  for (auto& [k, old] : items) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  items.emplace_back(key, std::move(v));
}

bool equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  const bool an = a.is_number() || a.kind == K::Bool, bn = b.is_number() || b.kind == K::Bool;
  if (an && bn) return a.as_double() == b.as_double();
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::Undefined:
    case K::None: return true;
    case K::String: return a.s == b.s;
    case K::Array:
      if (a.arr->size() != b.arr->size()) return false;
      for (size_t k = 0; k < a.arr->size(); ++k)
        if (!equal((*a.arr)[k], (*b.arr)[k])) return false;
      return true;
    case K::Object:
      if (a.obj->items.size() != b.obj->items.size()) return false;
      for (const auto& [k, v] : a.obj->items) {
        const Value* o = b.obj->find(k);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    case K::Function: return a.fn == b.fn;
    default: return false;
  }
}

namespace {

// Python's float repr: shortest round-trip digits, always with a '.' or an exponent.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", d);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string quote_repr(const std::string& s) {
  // Python prefers single quotes unless the text has one and no double quote.
  const char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == q) out += std::string("\\") + char(q);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += char(c);
  }
  return out + char(q);
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", c);
        else out += char(c);
    }
  }
  out += '"';
}

}  // namespace

std::string to_repr(const Value& v) { return v.is_string() ? quote_repr(v.s) : to_str(v); }

std::string to_str(const Value& v) {
  using K = Value::Kind;
  switch (v.kind) {
    case K::Undefined: return "";
    case K::None: return "None";
    case K::Bool: return v.b ? "True" : "False";
    case K::Int: return std::to_string(v.i);
    case K::Float: return float_repr(v.f);
    case K::String: return v.s;
    case K::Array: {
      std::string out = "[";
      for (size_t k = 0; k < v.arr->size(); ++k) out += (k ? ", " : "") + to_repr((*v.arr)[k]);
      return out + "]";
    }
    case K::Object: {
      std::string out = v.obj->is_namespace ? "<Namespace {" : "{";
      for (size_t k = 0; k < v.obj->items.size(); ++k)
        out += (k ? ", " : "") + quote_repr(v.obj->items[k].first) + ": " + to_repr(v.obj->items[k].second);
      return out + (v.obj->is_namespace ? "}>" : "}");
    }
    case K::Function: return "<function>";
  }
  return "";
}

std::string to_json(const Value& v, int indent, int depth) {
  using K = Value::Kind;
  std::string out;
  const std::string item_sep = indent >= 0 ? "," : ", ";
  auto newline = [&](int d) {
    std::string s;
    if (indent >= 0) s.append(1, '\n').append(size_t(indent * d), ' ');
    return s;
  };
  switch (v.kind) {
    case K::Undefined:
    case K::None: return "null";
    case K::Bool: return v.b ? "true" : "false";
    case K::Int: return std::to_string(v.i);
    case K::Float: return std::isfinite(v.f) ? float_repr(v.f) : (std::isnan(v.f) ? "NaN" : (v.f > 0 ? "Infinity" : "-Infinity"));
    case K::String: json_string(out, v.s); return out;
    case K::Array:
      if (v.arr->empty()) return "[]";
      out.push_back('[');
      for (size_t k = 0; k < v.arr->size(); ++k) {
        if (k) out += item_sep;
        out += newline(depth + 1);
        out += to_json((*v.arr)[k], indent, depth + 1);
      }
      return out + newline(depth) + "]";
    case K::Object:
      if (v.obj->items.empty()) return "{}";
      out.push_back('{');
      for (size_t k = 0; k < v.obj->items.size(); ++k) {
        if (k) out += item_sep;
        out += newline(depth + 1);
        json_string(out, v.obj->items[k].first);
        out += ": " + to_json(v.obj->items[k].second, indent, depth + 1);
      }
      return out + newline(depth) + "}";
    case K::Function: return "null";
  }
  return out;
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: return Value::integer(int64_t(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Value a = Value::array();
      for (const auto& e : j) a.arr->push_back(from_json(e));
      return a;
    }
    case nlohmann::ordered_json::value_t::object: {
      Value o = Value::object();
      for (const auto& [k, e] : j.items()) o.obj->items.emplace_back(k, from_json(e));
      return o;
    }
    default: return Value();
  }
}

}  // namespace moe::jinja
