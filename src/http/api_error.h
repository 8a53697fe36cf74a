#pragma once
// The error shape every HTTP front of moengine answers with (the engine's OpenAI API and the
// proxy alike, as OpenAI does): an HTTP status and
//   {"error": {"message": "...", "type": "...", "param": "max_tokens" | null, "code": "..."}}
// with the errors any such front can answer. The (status, type, code) triples are listed in
// docs/api.md; the constructors here and in server/api_error.h are the only place they are
// spelled.
#include <string>

#include "core/error.h"
#include "http/types.h"

namespace moe::http {

class ApiError : public Error {
 public:
  ApiError(Status status, std::string type, std::string code, const std::string& message, std::string param = "")
      : Error(message), status_(status), type_(std::move(type)), code_(std::move(code)), param_(std::move(param)) {}

  Status status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& code() const { return code_; }
  const std::string& param() const { return param_; }  // "" is sent as null

 private:
  Status status_;
  std::string type_, code_, param_;
};

inline constexpr const char* kInvalidRequest = "invalid_request_error";

// 400: the body is not JSON (or not the JSON object a request is).
ApiError invalid_json(const std::string& message);
// 400: a valid OpenAI value that this front does not implement (e.g. several prompts, or
// n > 1 behind the P/D proxy).
ApiError unsupported(const std::string& param, const std::string& message);
// 401: no or a wrong API key.
ApiError unauthorized(const std::string& message);
// The errors the HTTP layer answers itself (404 route, 405, 408, 413, 431, 400, 500).
ApiError http_error(Status status, const std::string& message);

std::string error_body(const ApiError& e);
// The whole response, JSON body and content type; 429 also carries Retry-After.
Response error_response(const ApiError& e);

}  // namespace moe::http
