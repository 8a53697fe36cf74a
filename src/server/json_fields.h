#pragma once
// Reading a request body's fields with their JSON types checked. A missing field and a
// field set to null are the same (OpenAI's clients send null for "not set"). A field of the
// wrong type is a 422 naming the field by its path ("stream_options.include_usage",
// "messages[2].content").
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moe::server {

// Key order is kept: chat templates print messages with tojson.
using Json = nlohmann::ordered_json;

// The body as a JSON object: 400 when it is not JSON, 422 when it is JSON but not an object.
Json parse_json_body(std::string_view body);

// "a string", "an integer", "the number 1.5", ... for error messages.
std::string describe_json(const Json& value);

class FieldReader {
 public:
  // object must be a JSON object; prefix is its own path ("" for the body).
  explicit FieldReader(const Json& object, std::string prefix = "");

  // The field, or null when it is absent or JSON null.
  const Json* get(std::string_view name) const;
  std::string path(std::string_view name) const;

  std::optional<std::string> string(std::string_view name) const;
  std::string required_string(std::string_view name) const;
  std::optional<bool> boolean(std::string_view name) const;
  // Integral JSON numbers (1 and 1.0, not 1.5) that fit in int64.
  std::optional<int64_t> integer(std::string_view name) const;
  std::optional<double> number(std::string_view name) const;
  const Json* object(std::string_view name) const;
  const Json* array(std::string_view name) const;
  // A string, or an array of strings ("stop").
  std::optional<std::vector<std::string>> strings(std::string_view name) const;
  std::optional<std::vector<int64_t>> integers(std::string_view name) const;

 private:
  const Json& object_;
  std::string prefix_;
};

// The integer value of a JSON number, if it is integral and fits in int64.
std::optional<int64_t> json_integer(const Json& value);

}  // namespace moe::server
