#pragma once
// What a routing policy knows of a request before it runs anywhere.
#include <cstdint>
#include <string>

namespace moe::routing {

struct RoutingRequest {
  std::string id;
  int64_t prompt_tokens = 0;
  // max_tokens, or an estimate where the client left it open: the decode policy reserves
  // this much of an instance's token budget for the request's lifetime.
  int64_t expected_output_tokens = 0;
  // On the caller's monotonic clock, in seconds; only differences to `now` matter.
  double arrival_s = 0;

  double age_s(double now_s) const { return now_s - arrival_s; }
};

}  // namespace moe::routing
