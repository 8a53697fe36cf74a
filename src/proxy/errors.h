#pragma once
// The errors the proxy answers itself, in the shape of the instances behind it (and of
// OpenAI: http/api_error.h). Errors an instance answered are relayed as they are, not
// rebuilt here.
#include <string>

#include "http/api_error.h"

namespace moe::proxy {

using http::ApiError;
using http::error_body;
using http::error_response;
using http::invalid_json;
using http::unauthorized;
using http::unsupported;

// 502: an instance could not be reached, broke off, or answered outside the protocol.
ApiError bad_gateway(const std::string& message);

}  // namespace moe::proxy
