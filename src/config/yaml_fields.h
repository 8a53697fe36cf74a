#pragma once
// Strict reading of YAML maps for configuration files: every key must be one the reader
// knows (a typo is an error, never silently ignored), appear once, and hold a value of the
// expected type and range. Errors read "FILE:LINE:COLUMN: FIELD: what is wrong", FIELD
// being the value's path in the file (e.g. `instances[1].port`).
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <vector>

namespace moe::config {

// The file's text; throws moe::Error naming it (and `what` it is) when it cannot be read.
std::string read_file(const std::string& path, const std::string& what);
// Parses YAML text; throws moe::Error "FILE:LINE:COLUMN: not valid YAML: ..." otherwise.
YAML::Node parse_yaml(const std::string& text, const std::string& file);

// Throws moe::Error located at `node` (line and column when yaml-cpp knows them).
[[noreturn]] void fail_at(const std::string& file, const YAML::Node& node, const std::string& field, const std::string& message);

// "FILE:LINE" of a node, for errors found after parsing.
std::string location(const std::string& file, const YAML::Node& node);

class MapReader {
 public:
  // `node` must be a map (null reads as an empty one) whose keys are all in `known`.
  MapReader(std::string file, const YAML::Node& node, std::string path, std::vector<std::string> known);

  // Present with a value (a key without one, `key:`, counts as absent).
  bool has(const std::string& key) const;
  YAML::Node get(const std::string& key) const;
  // The path of a key's value, e.g. "proxy.port"; `path` itself for an empty key.
  std::string field(const std::string& key) const;
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;

  // Each returns `fallback` when the key is absent and fails on a value of another type.
  std::string text(const std::string& key, const std::string& fallback) const;
  std::string choice(const std::string& key, const std::string& fallback, const std::vector<std::string>& allowed) const;
  int64_t integer(const std::string& key, int64_t fallback, int64_t min, int64_t max) const;
  double number(const std::string& key, double fallback, double exclusive_min) const;
  std::vector<std::string> texts(const std::string& key, const std::vector<std::string>& fallback) const;

 private:
  std::string file_;
  YAML::Node node_;
  std::string path_;
};

}  // namespace moe::config
