#pragma once
// Instance pools for routing tests, and the load a routed request adds, the way the proxy
// accounts it between engine reports.
#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

#include "proxy/policy/instance_view.h"
#include "proxy/policy/routing_request.h"

namespace moe::routing::testing {

inline InstanceView instance(std::string id, InstanceRole role) {
  InstanceView v;
  v.id = std::move(id);
  v.role = role;
  return v;
}

// n instances of one role, named p0.., d0.. or u0.. (unified).
inline std::vector<InstanceView> pool_of(InstanceRole role, int n) {
  const char* prefix = role == InstanceRole::prefill ? "p" : role == InstanceRole::decode ? "d" : "u";
  std::vector<InstanceView> pool;
  for (int i = 0; i < n; ++i) pool.push_back(instance(fmt::format("{}{}", prefix, i), role));
  return pool;
}

inline RoutingRequest request(int64_t prompt_tokens, int64_t expected_output_tokens = 0, double arrival_s = 0) {
  return {"r", prompt_tokens, expected_output_tokens, arrival_s};
}

// A request queued for prefill at v.
inline void admit_prefill(InstanceView& v, const RoutingRequest& r) {
  v.load.queued_prefill_tokens += uncached_prompt_tokens(v, r);
  ++v.load.prefill_requests;
  ++v.load.waiting_requests;
}

// A request decoding at v, its prompt's KV pulled in.
inline void admit_decode(InstanceView& v, const RoutingRequest& r) {
  v.load.kv_tokens += r.prompt_tokens;
  v.load.remaining_output_tokens += r.expected_output_tokens;
  ++v.load.running_sequences;
}

}  // namespace moe::routing::testing
