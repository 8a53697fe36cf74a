#pragma once
// The errors only the engine's API answers, in the shape of http/api_error.h (whose
// ApiError and common constructors are used here as they are).
#include <string>

#include "http/api_error.h"

namespace moe::server {

using http::ApiError;
using http::error_body;
using http::error_response;
using http::http_error;
using http::invalid_json;
using http::unauthorized;
using http::unsupported;

// 422: a field has the wrong JSON type, or a required one is missing (schema violations).
ApiError wrong_type(const std::string& param, const std::string& message);
ApiError missing_field(const std::string& param);
// 400: a well-typed value that is out of range or otherwise unusable.
ApiError invalid_value(const std::string& param, const std::string& message);
// 400: the prompt, or prompt plus completion, does not fit the context.
ApiError context_length_exceeded(const std::string& param, const std::string& message);
// 404: a model this server does not serve.
ApiError model_not_found(const std::string& model);
// 429: the engine's waiting queue is full.
ApiError queue_full(const std::string& message);
// 400: a prefill/decode request sent to an instance whose role does not take it.
ApiError wrong_role(const std::string& message);
// 502: a decode instance could not load the KV of a hand-off (and does not recompute).
ApiError kv_transfer_failed(const std::string& message);
// 410 / 404: a lease release that came after the lease ran out, or names none.
ApiError lease_expired(const std::string& message);
ApiError lease_unknown(const std::string& message);
// 404: GET /internal/kv/blocks on an instance started without --kv-events-endpoint.
ApiError kv_events_off(const std::string& message);
// 500: the engine failed on a request it had accepted.
ApiError internal_error(const std::string& message);

}  // namespace moe::server
