#include "proxy/errors.h"

namespace moe::proxy {

ApiError bad_gateway(const std::string& message) {
  return ApiError(http::Status::bad_gateway, "server_error", "bad_gateway", message);
}

ApiError no_instance(const std::string& message) {
  return ApiError(http::Status::service_unavailable, "server_error", "no_instance_available", message);
}

ApiError proxy_queue_full(const std::string& message) {
  return ApiError(http::Status::too_many_requests, "rate_limit_error", "queue_full", message);
}

ApiError admin_forbidden(const std::string& message) {
  return ApiError(http::Status::forbidden, "permission_error", "admin_forbidden", message);
}

ApiError unknown_instance(const std::string& message) {
  return ApiError(http::Status::not_found, http::kInvalidRequest, "unknown_instance", message);
}

ApiError bad_admin_request(const std::string& message) {
  return ApiError(http::Status::bad_request, http::kInvalidRequest, "invalid_admin_request", message);
}

}  // namespace moe::proxy
