#pragma once
// Values of the chat-template interpreter. They behave like the Python objects Jinja2
// works on (what transformers renders chat templates with): Python truthiness, equality,
// str() and json.dumps() spellings, so rendered prompts match byte for byte.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace moe::jinja {

struct Value;
using Array = std::vector<Value>;
struct Object;
using Kwargs = std::vector<std::pair<std::string, Value>>;
using Function = std::function<Value(std::vector<Value>& args, Kwargs& kwargs)>;

struct Value {
  enum class Kind { Undefined, None, Bool, Int, Float, String, Array, Object, Function };
  Kind kind = Kind::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<Array> arr;    // shared: lists and dicts are references, as in Python
  std::shared_ptr<Object> obj;
  std::shared_ptr<Function> fn;

  static Value none() { return make(Kind::None); }
  static Value boolean(bool v) { Value x = make(Kind::Bool); x.b = v; return x; }
  static Value integer(int64_t v) { Value x = make(Kind::Int); x.i = v; return x; }
  static Value number(double v) { Value x = make(Kind::Float); x.f = v; return x; }
  static Value string(std::string v) { Value x = make(Kind::String); x.s = std::move(v); return x; }
  static Value array(Array v = {});
  static Value object(bool is_namespace = false);
  static Value function(Function f);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float; }
  bool is_array() const { return kind == Kind::Array; }
  bool is_object() const { return kind == Kind::Object; }
  double as_double() const { return kind == Kind::Int ? double(i) : kind == Kind::Bool ? double(b) : f; }

  bool truthy() const;
  // Python's type name, for error messages ("str", "list", "dict", ...).
  std::string type_name() const;

 private:
  static Value make(Kind k) { Value x; x.kind = k; return x; }
};

// A dict keeps insertion order (tojson prints keys in that order, as Python does).
struct Object {
  bool is_namespace = false;
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
};

bool equal(const Value& a, const Value& b);
// Python str(): strings as is, None -> "None", True -> "True", lists and dicts as repr.
std::string to_str(const Value& v);
// Python repr() of a value inside a container.
std::string to_repr(const Value& v);
// json.dumps with ensure_ascii=False, as transformers' tojson filter: ", " and ": "
// separators, or "," and newlines with `indent`.
std::string to_json(const Value& v, int indent = -1, int depth = 0);

Value from_json(const nlohmann::ordered_json& j);

}  // namespace moe::jinja
