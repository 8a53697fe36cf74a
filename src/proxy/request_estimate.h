#pragma once
// What routing knows of a request before any instance has tokenized it: its prompt length
// estimated from the body (token ids counted exactly, text at about four bytes a token,
// the ratio BPE vocabularies give English prose and code) and its expected output
// (max_tokens, or kDefaultExpectedOutput when the client left it open).
#include <string>

#include "proxy/merge.h"
#include "proxy/policy/routing_request.h"

namespace moe::proxy {

constexpr int64_t kDefaultExpectedOutput = 256;

int64_t estimate_prompt_tokens(Api api, const Json& body);
routing::RoutingRequest routing_request(Api api, const Json& body, std::string id, double arrival_s);

}  // namespace moe::proxy
