#pragma once
// The errors the API answers, each an HTTP status plus OpenAI's error object:
//   {"error": {"message": "...", "type": "...", "param": "max_tokens" | null, "code": "..."}}
// The (status, type, code) triples are listed in docs/api.md; the constructors below are the
// only place they are spelled.
#include <string>

#include "core/error.h"
#include "http/types.h"

namespace moe::server {

class ApiError : public Error {
 public:
  ApiError(http::Status status, std::string type, std::string code, const std::string& message, std::string param = "")
      : Error(message), status_(status), type_(std::move(type)), code_(std::move(code)), param_(std::move(param)) {}

  http::Status status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& code() const { return code_; }
  const std::string& param() const { return param_; }  // "" is sent as null

 private:
  http::Status status_;
  std::string type_, code_, param_;
};

// 400: the body is not JSON.
ApiError invalid_json(const std::string& message);
// 422: a field has the wrong JSON type, or a required one is missing (schema violations).
ApiError wrong_type(const std::string& param, const std::string& message);
ApiError missing_field(const std::string& param);
// 400: a well-typed value that is out of range or otherwise unusable.
ApiError invalid_value(const std::string& param, const std::string& message);
// 400: a valid OpenAI value that this server does not implement (n > 1, several prompts).
ApiError unsupported(const std::string& param, const std::string& message);
// 400: the prompt, or prompt plus completion, does not fit the context.
ApiError context_length_exceeded(const std::string& param, const std::string& message);
// 404: a model this server does not serve.
ApiError model_not_found(const std::string& model);
// 401: no or a wrong API key.
ApiError unauthorized(const std::string& message);
// 429: the engine's waiting queue is full.
ApiError queue_full(const std::string& message);
// 400: a prefill/decode request sent to an instance whose role does not take it.
ApiError wrong_role(const std::string& message);
// 502: a decode instance could not load the KV of a hand-off (and does not recompute).
ApiError kv_transfer_failed(const std::string& message);
// 410 / 404: a lease release that came after the lease ran out, or names none.
ApiError lease_expired(const std::string& message);
ApiError lease_unknown(const std::string& message);
// 500: the engine failed on a request it had accepted.
ApiError internal_error(const std::string& message);
// The errors the HTTP layer answers itself (404 route, 405, 408, 413, 431, 400, 500).
ApiError http_error(http::Status status, const std::string& message);

std::string error_body(const ApiError& e);
// The whole response, JSON body and content type; 429 also carries Retry-After.
http::Response error_response(const ApiError& e);

}  // namespace moe::server
