#pragma once
// The errors the proxy answers itself, in the same shape as the instances behind it (and
// OpenAI): an HTTP status and {"error": {"message", "type", "param", "code"}}. Errors an
// instance answered are relayed as they are, not rebuilt here.
#include <string>

#include "core/error.h"
#include "http/types.h"

namespace moe::proxy {

class ProxyError : public Error {
 public:
  ProxyError(http::Status status, std::string type, std::string code, const std::string& message, std::string param = "")
      : Error(message), status_(status), type_(std::move(type)), code_(std::move(code)), param_(std::move(param)) {}

  http::Status status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& code() const { return code_; }
  const std::string& param() const { return param_; }  // "" is sent as null

 private:
  http::Status status_;
  std::string type_, code_, param_;
};

// 400: the body is not a JSON object.
ProxyError invalid_json(const std::string& message);
// 400: a valid request the proxy cannot carry out (n > 1).
ProxyError unsupported(const std::string& param, const std::string& message);
// 401: no or a wrong API key.
ProxyError unauthorized(const std::string& message);
// 502: an instance could not be reached, broke off, or answered outside the protocol.
ProxyError bad_gateway(const std::string& message);
// The errors the HTTP layer answers itself (404 route, 405, 408, 413, 431, 400, 500).
ProxyError http_error(http::Status status, const std::string& message);

std::string error_body(const ProxyError& e);
http::Response error_response(const ProxyError& e);

}  // namespace moe::proxy
