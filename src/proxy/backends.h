#pragma once
// An instance as the legs address it: its URL as given (what messages name it by), the
// parsed base, and its pool of kept-alive connections, which every leg to it shares.
#include <memory>
#include <string>

#include "http/http_client.h"

namespace moe::proxy {

namespace asio = boost::asio;

struct Backend {
  std::string url;  // without trailing '/'
  http::Url base;
  std::shared_ptr<http::HttpClient> connections;
};

}  // namespace moe::proxy
