#pragma once
// The instances behind a proxy, from a YAML file (`moengine proxy --config FILE`; `moengine
// launch` writes one for the proxy it starts):
//
//   instances:
//     - url: http://10.0.0.5:8100   # required
//       role: prefill               # prefill, decode or both (required)
//       name: p0                    # default: the URL
//       weight: 2                   # share of traffic for the weighted policies (default 1)
//       group: decode-0             # the expert-parallel group it is a rank of (default: none)
//
// Each instance's capacity (sequences, KV tokens) comes from its own /health.
#include <string>
#include <vector>

#include "proxy/registry.h"

namespace moe::proxy {

// Throws moe::Error naming the file, line and field of the first problem (an unknown key
// included), a malformed URL, or a name used twice.
std::vector<InstanceSpec> parse_instances_file(const std::string& yaml_text, const std::string& file_name);
std::vector<InstanceSpec> load_instances_file(const std::string& path);

// Such a file's text, which parse_instances_file reads back to `instances`.
std::string instances_file_text(const std::vector<InstanceSpec>& instances);

}  // namespace moe::proxy
