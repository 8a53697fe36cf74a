#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace moe::server {

namespace {

constexpr const char* kInvalidRequest = "invalid_request_error";

}  // namespace

ApiError invalid_json(const std::string& message) {
  return ApiError(http::Status::bad_request, kInvalidRequest, "invalid_json", message);
}

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

ApiError unsupported(const std::string& param, const std::string& message) {
  return ApiError(http::Status::bad_request, kInvalidRequest, "unsupported_value", message, param);
}

ApiError context_length_exceeded(const std::string& param, const std::string& message) {
  return ApiError(http::Status::bad_request, kInvalidRequest, "context_length_exceeded", message, param);
}

ApiError model_not_found(const std::string& model) {
  return ApiError(http::Status::not_found, kInvalidRequest, "model_not_found",
                  "The model `" + model + "` does not exist (GET /v1/models lists the served models)", "model");
}

ApiError unauthorized(const std::string& message) {
  return ApiError(http::Status::unauthorized, kInvalidRequest, "invalid_api_key", message);
}

ApiError queue_full(const std::string& message) {
  return ApiError(http::Status::too_many_requests, "rate_limit_error", "queue_full", message);
}

ApiError internal_error(const std::string& message) {
  return ApiError(http::Status::internal_server_error, "server_error", "internal_error", message);
}

ApiError http_error(http::Status status, const std::string& message) {
  switch (status) {
    case http::Status::not_found:
      return ApiError(status, kInvalidRequest, "unknown_url", message);
    case http::Status::method_not_allowed:
      return ApiError(status, kInvalidRequest, "method_not_allowed", message);
    case http::Status::request_timeout:
      return ApiError(status, kInvalidRequest, "request_timeout", message);
    case http::Status::payload_too_large:
      return ApiError(status, kInvalidRequest, "request_too_large", message);
    case http::Status::request_header_fields_too_large:
      return ApiError(status, kInvalidRequest, "header_too_large", message);
    case http::Status::bad_request:
      return ApiError(status, kInvalidRequest, "malformed_request", message);
    default:
      return internal_error(message);
  }
}

std::string error_body(const ApiError& e) {
  nlohmann::ordered_json j;
  j["error"] = {{"message", e.what()},
                {"type", e.type()},
                {"param", e.param().empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(e.param())},
                {"code", e.code()}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

http::Response error_response(const ApiError& e) {
  http::Response res{e.status(), 11};
  res.set(http::Field::content_type, "application/json");
  if (e.status() == http::Status::too_many_requests) res.set(http::Field::retry_after, "1");
  res.body() = error_body(e);
  return res;
}

}  // namespace moe::server
