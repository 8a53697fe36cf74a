#pragma once
// What routing knows of a request before any instance has tokenized it: its prompt length
// estimated from the body (token ids counted exactly, text at about four bytes a token,
// the ratio BPE vocabularies give English prose and code) and its expected output
// (max_tokens, or kDefaultExpectedOutput when the client left it open).
#include <chrono>
#include <string>

#include "proxy/merge.h"
#include "proxy/policy/routing_request.h"

namespace moe::proxy {

constexpr int64_t kDefaultExpectedOutput = 256;

int64_t estimate_prompt_tokens(Api api, const Json& body);
routing::RoutingRequest routing_request(Api api, const Json& body, std::string id, double arrival_s);

// The clock of RoutingRequest::arrival_s: the steady clock, in seconds.
inline double routing_seconds(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

}  // namespace moe::proxy
