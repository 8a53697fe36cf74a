#include "http/api_error.h"

#include <nlohmann/json.hpp>

namespace moe::http {

ApiError invalid_json(const std::string& message) { return ApiError(Status::bad_request, kInvalidRequest, "invalid_json", message); }

ApiError unsupported(const std::string& param, const std::string& message) {
  return ApiError(Status::bad_request, kInvalidRequest, "unsupported_value", message, param);
}

ApiError unauthorized(const std::string& message) {
  return ApiError(Status::unauthorized, kInvalidRequest, "invalid_api_key", message);
}

ApiError http_error(Status status, const std::string& message) {
  switch (status) {
    case Status::not_found:
      return ApiError(status, kInvalidRequest, "unknown_url", message);
    case Status::method_not_allowed:
      return ApiError(status, kInvalidRequest, "method_not_allowed", message);
    case Status::request_timeout:
      return ApiError(status, kInvalidRequest, "request_timeout", message);
    case Status::payload_too_large:
      return ApiError(status, kInvalidRequest, "request_too_large", message);
    case Status::request_header_fields_too_large:
      return ApiError(status, kInvalidRequest, "header_too_large", message);
    case Status::bad_request:
      return ApiError(status, kInvalidRequest, "malformed_request", message);
    default:
      return ApiError(Status::internal_server_error, "server_error", "internal_error", message);
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

Response error_response(const ApiError& e) {
  Response res{e.status(), 11};
  res.set(Field::content_type, "application/json");
  if (e.status() == Status::too_many_requests) res.set(Field::retry_after, "1");
  res.body() = error_body(e);
  return res;
}

}  // namespace moe::http
