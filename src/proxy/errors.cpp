#include "proxy/errors.h"

namespace moe::proxy {

ApiError bad_gateway(const std::string& message) {
  return ApiError(http::Status::bad_gateway, "server_error", "bad_gateway", message);
}

}  // namespace moe::proxy
