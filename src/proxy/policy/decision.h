#pragma once
// A policy's answer: which instance, and why, in words a metric and a log line can use.
#include <cstddef>
#include <optional>
#include <string>

namespace moe::routing {

struct Decision {
  std::optional<size_t> instance;  // index into the instances the policy was given
  // Serve the whole request on `instance` (a unified one), with no decode leg: the
  // skip-disaggregation decision.
  bool whole_request = false;
  // A short label from a fixed set (e.g. "prefix_match", "no_eligible_instance"): what
  // routing decisions are counted by.
  std::string reason;
  // The numbers behind the choice, naming instances by id: for the access log, and the
  // error message when no instance is eligible.
  std::string detail;
};

}  // namespace moe::routing
