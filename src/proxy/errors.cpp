#include "proxy/errors.h"

#include <nlohmann/json.hpp>

namespace moe::proxy {

namespace {

constexpr const char* kInvalidRequest = "invalid_request_error";

}  // namespace

ProxyError invalid_json(const std::string& message) {
  return ProxyError(http::Status::bad_request, kInvalidRequest, "invalid_json", message);
}

ProxyError unsupported(const std::string& param, const std::string& message) {
  return ProxyError(http::Status::bad_request, kInvalidRequest, "unsupported_value", message, param);
}

ProxyError unauthorized(const std::string& message) {
  return ProxyError(http::Status::unauthorized, kInvalidRequest, "invalid_api_key", message);
}

ProxyError bad_gateway(const std::string& message) {
  return ProxyError(http::Status::bad_gateway, "server_error", "bad_gateway", message);
}

ProxyError http_error(http::Status status, const std::string& message) {
  switch (status) {
    case http::Status::not_found:
      return ProxyError(status, kInvalidRequest, "unknown_url", message);
    case http::Status::method_not_allowed:
      return ProxyError(status, kInvalidRequest, "method_not_allowed", message);
    case http::Status::request_timeout:
      return ProxyError(status, kInvalidRequest, "request_timeout", message);
    case http::Status::payload_too_large:
      return ProxyError(status, kInvalidRequest, "request_too_large", message);
    case http::Status::request_header_fields_too_large:
      return ProxyError(status, kInvalidRequest, "header_too_large", message);
    case http::Status::bad_request:
      return ProxyError(status, kInvalidRequest, "malformed_request", message);
    default:
      return ProxyError(http::Status::internal_server_error, "server_error", "internal_error", message);
  }
}

std::string error_body(const ProxyError& e) {
  nlohmann::ordered_json j;
  j["error"] = {{"message", e.what()},
                {"type", e.type()},
                {"param", e.param().empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(e.param())},
                {"code", e.code()}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

http::Response error_response(const ProxyError& e) {
  http::Response res{e.status(), 11};
  res.set(http::Field::content_type, "application/json");
  res.body() = error_body(e);
  return res;
}

}  // namespace moe::proxy
