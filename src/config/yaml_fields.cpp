#include "config/yaml_fields.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <set>

#include "core/error.h"

namespace moe::config {

std::string read_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the {}", path, what);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

YAML::Node parse_yaml(const std::string& text, const std::string& file) {
  try {
    return YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    if (e.mark.is_null()) fail("{}: not valid YAML: {}", file, e.msg);
    fail("{}:{}:{}: not valid YAML: {}", file, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
}

void fail_at(const std::string& file, const YAML::Node& node, const std::string& field, const std::string& message) {
  const YAML::Mark mark = node.Mark();
  const std::string where = mark.is_null() ? file : fmt::format("{}:{}:{}", file, mark.line + 1, mark.column + 1);
  fail("{}: {}: {}", where, field, message);
}

std::string location(const std::string& file, const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  return mark.is_null() ? file : fmt::format("{}:{}", file, mark.line + 1);
}

MapReader::MapReader(std::string file, const YAML::Node& node, std::string path, std::vector<std::string> known)
    : file_(std::move(file)), node_(node), path_(std::move(path)) {
  if (node_.IsNull()) return;
  if (!node_.IsMap()) fail_at(file_, node_, path_, fmt::format("must be a map with the keys {}", fmt::join(known, ", ")));
  std::set<std::string> seen;
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    const YAML::Node key = it->first;
    if (!key.IsScalar()) fail_at(file_, key, path_, "keys must be plain names");
    const std::string name = key.Scalar();
    const std::string where = path_.empty() ? name : path_ + "." + name;
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      fail_at(file_, key, where, fmt::format("unknown key (expected one of {})", fmt::join(known, ", ")));
    }
    if (!seen.insert(name).second) fail_at(file_, key, where, "given twice");
  }
}

bool MapReader::has(const std::string& key) const {
  if (!node_.IsMap()) return false;
  const YAML::Node v = node_[key];
  return v.IsDefined() && !v.IsNull();
}

YAML::Node MapReader::get(const std::string& key) const {
  return has(key) ? node_[key] : YAML::Node(YAML::NodeType::Null);
}

std::string MapReader::field(const std::string& key) const {
  if (key.empty()) return path_;
  return path_.empty() ? key : path_ + "." + key;
}

void MapReader::fail(const std::string& key, const std::string& message) const {
  fail_at(file_, has(key) ? node_[key] : node_, field(key), message);
}

std::string MapReader::text(const std::string& key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  const YAML::Node v = node_[key];
  if (!v.IsScalar()) fail(key, "must be a single value, not a list or a map");
  return v.Scalar();
}

std::string MapReader::choice(const std::string& key, const std::string& fallback, const std::vector<std::string>& allowed) const {
  const std::string v = text(key, fallback);
  if (std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
    fail(key, fmt::format("'{}' is not one of {}", v, fmt::join(allowed, ", ")));
  }
  return v;
}

int64_t MapReader::integer(const std::string& key, int64_t fallback, int64_t min, int64_t max) const {
  if (!has(key)) return fallback;
  const YAML::Node v = node_[key];
  int64_t value = 0;
  if (!v.IsScalar()) fail(key, "must be an integer");
  if (!YAML::convert<int64_t>::decode(v, value)) fail(key, fmt::format("'{}' is not an integer", v.Scalar()));
  if (value < min || value > max) fail(key, fmt::format("{} is out of range [{}, {}]", value, min, max));
  return value;
}

double MapReader::number(const std::string& key, double fallback, double exclusive_min) const {
  if (!has(key)) return fallback;
  const YAML::Node v = node_[key];
  double value = 0;
  if (!v.IsScalar()) fail(key, "must be a number");
  if (!YAML::convert<double>::decode(v, value)) fail(key, fmt::format("'{}' is not a number", v.Scalar()));
  if (!(value > exclusive_min)) fail(key, fmt::format("must be more than {}, got {}", exclusive_min, value));
  return value;
}

std::vector<std::string> MapReader::texts(const std::string& key, const std::vector<std::string>& fallback) const {
  if (!has(key)) return fallback;
  const YAML::Node v = node_[key];
  if (!v.IsSequence()) fail(key, "must be a list, e.g. [--max-num-seqs, 8]");
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].IsScalar()) fail_at(file_, v[i], fmt::format("{}[{}]", field(key), i), "must be a single value");
    out.push_back(v[i].Scalar());
  }
  return out;
}

}  // namespace moe::config
