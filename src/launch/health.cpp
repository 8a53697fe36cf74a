#include "launch/health.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include "http/http_client.h"

namespace moe::launch {

int health_status(const std::string& base_url, std::chrono::milliseconds timeout) {
  namespace asio = boost::asio;
  asio::io_context io;
  http::HttpClient client(http::parse_url(base_url), http::HttpClientOptions{timeout});
  int status = 0;
  auto call = [&]() -> asio::awaitable<void> {
    http::HttpRequest req;
    req.method = "GET";
    req.target = "/health";
    const http::HttpResponse res = co_await client.fetch(std::move(req));
    status = res.status;
  };
  // A server that is not up yet fails the call: that is an answer (0), not an error.
  asio::co_spawn(io, call(), [](std::exception_ptr) {});
  io.run();
  return status;
}

}  // namespace moe::launch
