#include "server/api_error.h"

namespace moe::server {

using http::kInvalidRequest;

ApiError wrong_type(const std::string& param, const std::string& message) {
  return ApiError(http::Status::unprocessable_entity, kInvalidRequest, "invalid_type", message, param);
}

ApiError missing_field(const std::string& param) {
  return ApiError(http::Status::unprocessable_entity, kInvalidRequest, "missing_required_parameter",
                  "\"" + param + "\" is required", param);
}

ApiError invalid_value(const std::string& param, const std::string& message) {
  return ApiError(http::Status::bad_request, kInvalidRequest, "invalid_value", message, param);
}

ApiError wrong_role(const std::string& message) {
  return ApiError(http::Status::bad_request, kInvalidRequest, "wrong_role", message, "kv_transfer_params");
}

ApiError kv_transfer_failed(const std::string& message) {
  return ApiError(http::Status::bad_gateway, "server_error", "kv_transfer_failed", message);
}

ApiError lease_expired(const std::string& message) {
  return ApiError(http::Status::gone, kInvalidRequest, "lease_expired", message, "remote_request_id");
}

ApiError lease_unknown(const std::string& message) {
  return ApiError(http::Status::not_found, kInvalidRequest, "lease_unknown", message, "remote_request_id");
}

ApiError context_length_exceeded(const std::string& param, const std::string& message) {
  return ApiError(http::Status::bad_request, kInvalidRequest, "context_length_exceeded", message, param);
}

ApiError model_not_found(const std::string& model) {
  return ApiError(http::Status::not_found, kInvalidRequest, "model_not_found",
                  "The model `" + model + "` does not exist (GET /v1/models lists the served models)", "model");
}

ApiError queue_full(const std::string& message) {
  return ApiError(http::Status::too_many_requests, "rate_limit_error", "queue_full", message);
}

ApiError kv_events_off(const std::string& message) {
  return ApiError(http::Status::not_found, kInvalidRequest, "kv_events_off", message);
}

ApiError internal_error(const std::string& message) {
  return ApiError(http::Status::internal_server_error, "server_error", "internal_error", message);
}

}  // namespace moe::server
