#pragma once
// The HTTP vocabulary the server and its handlers share: Beast's message types with a
// string body, and short names for the Asio pieces every coroutine uses.
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

namespace moe::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using Status = beast::http::status;
using Verb = beast::http::verb;
using Field = beast::http::field;
using Request = beast::http::request<beast::http::string_body>;
using Response = beast::http::response<beast::http::string_body>;

// Builds the body of an error the HTTP layer answers itself (unknown route, wrong method,
// timeout, body too large, malformed request), so every error a client sees has the same
// shape as the application's own.
using ErrorResponder = std::function<Response(Status status, const std::string& message)>;

struct ServerConfig {
  std::string host = "127.0.0.1";
  unsigned short port = 8000;  // 0: any free port (see HttpServer::port())
  int io_threads = 1;
  size_t max_body_bytes = size_t(16) << 20;
  size_t max_header_bytes = size_t(16) << 10;
  // A kept-alive connection that sends nothing for this long is closed without a word.
  std::chrono::milliseconds idle_timeout{65000};
  // From the first byte of a request to the end of its header, and then to the end of its
  // body; either one running out is a 408 and the connection is closed.
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds body_timeout{30000};
  // One write to the client (a response, or one streamed event) that takes longer than this
  // means the client stopped reading: it counts as gone.
  std::chrono::milliseconds write_timeout{60000};
};

}  // namespace moe::http
