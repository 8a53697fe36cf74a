#include "server/json_fields.h"

#include <fmt/format.h>

#include <cmath>

#include "server/api_error.h"

namespace moe::server {

Json parse_json_body(std::string_view body) {
  Json j;
  try {
    j = Json::parse(body.begin(), body.end());
  } catch (const nlohmann::json::exception& e) {
    // A syntax error, or a number too large for a double ("1e999"). nlohmann's text starts
    // with its own prefix ("[json.exception.parse_error.101] parse error at line 1, ..."):
    // keep what a client can act on.
    const std::string what = e.what();
    const size_t at = what.find("] ");
    throw invalid_json("the request body is not valid JSON: " + (at == std::string::npos ? what : what.substr(at + 2)));
  }
  if (!j.is_object()) throw wrong_type("", "the request body must be a JSON object, got " + describe_json(j));
  return j;
}

std::string describe_json(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return fmt::format("the number {}", v.get<double>());
    default: return "an unsupported JSON value";
  }
}

std::optional<int64_t> json_integer(const Json& v) {
  if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<int64_t>();
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u <= uint64_t(INT64_MAX)) return int64_t(u);
    return std::nullopt;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && d >= -9.2e18 && d <= 9.2e18) return int64_t(d);
  }
  return std::nullopt;
}

FieldReader::FieldReader(const Json& object, std::string prefix) : object_(object), prefix_(std::move(prefix)) {}

std::string FieldReader::path(std::string_view name) const {
  return prefix_.empty() ? std::string(name) : prefix_ + "." + std::string(name);
}

const Json* FieldReader::get(std::string_view name) const {
  const auto it = object_.find(name);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<std::string> FieldReader::string(std::string_view name) const {
  const Json* v = get(name);
  if (!v) return std::nullopt;
  if (!v->is_string()) throw wrong_type(path(name), fmt::format("\"{}\" must be a string, got {}", path(name), describe_json(*v)));
  return v->get<std::string>();
}

std::string FieldReader::required_string(std::string_view name) const {
  std::optional<std::string> s = string(name);
  if (!s) throw missing_field(path(name));
  return *s;
}

std::optional<bool> FieldReader::boolean(std::string_view name) const {
  const Json* v = get(name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) throw wrong_type(path(name), fmt::format("\"{}\" must be a boolean, got {}", path(name), describe_json(*v)));
  return v->get<bool>();
}

std::optional<int64_t> FieldReader::integer(std::string_view name) const {
  const Json* v = get(name);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw wrong_type(path(name), fmt::format("\"{}\" must be an integer, got {}", path(name), describe_json(*v)));
  const std::optional<int64_t> i = json_integer(*v);
  if (i) return i;
  if (v->is_number_float() && v->get<double>() != std::floor(v->get<double>())) {
    throw wrong_type(path(name), fmt::format("\"{}\" must be an integer, got {}", path(name), describe_json(*v)));
  }
  throw invalid_value(path(name), fmt::format("\"{}\" is out of the 64-bit integer range, got {}", path(name), v->dump()));
}

std::optional<double> FieldReader::number(std::string_view name) const {
  const Json* v = get(name);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw wrong_type(path(name), fmt::format("\"{}\" must be a number, got {}", path(name), describe_json(*v)));
  return v->get<double>();
}

const Json* FieldReader::object(std::string_view name) const {
  const Json* v = get(name);
  if (v && !v->is_object()) throw wrong_type(path(name), fmt::format("\"{}\" must be an object, got {}", path(name), describe_json(*v)));
  return v;
}

const Json* FieldReader::array(std::string_view name) const {
  const Json* v = get(name);
  if (v && !v->is_array()) throw wrong_type(path(name), fmt::format("\"{}\" must be an array, got {}", path(name), describe_json(*v)));
  return v;
}

std::optional<std::vector<std::string>> FieldReader::strings(std::string_view name) const {
  const Json* v = get(name);
  if (!v) return std::nullopt;
  if (v->is_string()) return std::vector<std::string>{v->get<std::string>()};
  if (!v->is_array()) {
    throw wrong_type(path(name), fmt::format("\"{}\" must be a string or an array of strings, got {}", path(name), describe_json(*v)));
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& e = (*v)[i];
    if (!e.is_string()) {
      throw wrong_type(path(name), fmt::format("\"{}[{}]\" must be a string, got {}", path(name), i, describe_json(e)));
    }
    out.push_back(e.get<std::string>());
  }
  return out;
}

std::optional<std::vector<int64_t>> FieldReader::integers(std::string_view name) const {
  const Json* v = array(name);
  if (!v) return std::nullopt;
  std::vector<int64_t> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const std::optional<int64_t> x = json_integer((*v)[i]);
    if (!x) throw wrong_type(path(name), fmt::format("\"{}[{}]\" must be an integer, got {}", path(name), i, describe_json((*v)[i])));
    out.push_back(*x);
  }
  return out;
}

}  // namespace moe::server
