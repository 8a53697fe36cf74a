#include "proxy/instances_file.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <set>

#include "config/yaml_fields.h"
#include "core/error.h"

namespace moe::proxy {

std::vector<InstanceSpec> parse_instances_file(const std::string& yaml_text, const std::string& file_name) {
  const YAML::Node root = config::parse_yaml(yaml_text, file_name);
  if (!root.IsMap()) fail("{}: must be a map with the key instances", file_name);
  const config::MapReader top(file_name, root, "", {"instances"});
  const YAML::Node list = top.get("instances");
  if (!list.IsSequence() || list.size() == 0) top.fail("instances", "must be a non-empty list of instances (each with a url and a role)");
  std::vector<InstanceSpec> out;
  std::set<std::string> names;
  for (size_t i = 0; i < list.size(); ++i) {
    const config::MapReader r(file_name, list[i], fmt::format("instances[{}]", i), {"url", "role", "name", "weight", "group"});
    if (!r.has("url")) r.fail("url", "is required (http://HOST:PORT)");
    if (!r.has("role")) r.fail("role", "is required (prefill, decode or both)");
    InstanceSpec s;
    s.url = r.text("url", "");
    try {
      http::parse_url(s.url);
    } catch (const Error& e) {
      r.fail("url", e.what());
    }
    s.role = parse_instance_role(r.choice("role", "both", {"prefill", "decode", "both"}));
    s.name = r.text("name", s.url);
    s.weight = r.number("weight", 1.0, 0.0);
    s.group = r.text("group", "");
    if (!names.insert(s.name).second) r.fail("name", fmt::format("'{}' names another instance already", s.name));
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<InstanceSpec> load_instances_file(const std::string& path) {
  return parse_instances_file(config::read_file(path, "instances file"), path);
}

std::string instances_file_text(const std::vector<InstanceSpec>& instances) {
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "instances" << YAML::Value << YAML::BeginSeq;
  for (const InstanceSpec& s : instances) {
    out << YAML::BeginMap;
    out << YAML::Key << "name" << YAML::Value << s.name;
    out << YAML::Key << "url" << YAML::Value << s.url;
    out << YAML::Key << "role" << YAML::Value << instance_role_name(s.role);
    out << YAML::Key << "weight" << YAML::Value << s.weight;
    if (!s.group.empty()) out << YAML::Key << "group" << YAML::Value << s.group;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace moe::proxy
