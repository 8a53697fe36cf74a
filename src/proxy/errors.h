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
// 503: no instance could take a leg within the queue timeout (all down, draining or full).
ApiError no_instance(const std::string& message);
// 429 (with Retry-After): the proxy's queue of requests waiting for an instance is full.
ApiError proxy_queue_full(const std::string& message);
// 403: the admin API is off, or the admin key is wrong.
ApiError admin_forbidden(const std::string& message);
// 404: the admin API names an instance the proxy does not have.
ApiError unknown_instance(const std::string& message);
// 400: an admin request's body is not what the route takes.
ApiError bad_admin_request(const std::string& message);

}  // namespace moe::proxy
