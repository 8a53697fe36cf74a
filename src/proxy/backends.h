#pragma once
// An instance as the legs address it: its URL as given (what messages name it by) and
// the parsed base the HTTP client connects to.
#include <string>

#include "http/http_client.h"

namespace moe::proxy {

namespace asio = boost::asio;

struct Backend {
  std::string url;  // without trailing '/'
  http::Url base;
};

}  // namespace moe::proxy
