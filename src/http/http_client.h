#pragma once
// An HTTP/1.1 client on Boost.Asio and Beast with C++20 coroutines: it sends a request and
// reads the answer whole, or as a Server-Sent-Events stream one event at a time, each event
// stamped with the time its last bytes arrived. Idle connections are kept for reuse
// (keep-alive). Plain http only. `bench serve`, the proxy and the decode instances' calls
// to their prefill instances use it.
//
// One client may be shared by coroutines on any number of threads and strands: the shared
// state (the idle connections and the resolved address) is behind a mutex, and each
// connection runs on the executor of the coroutine that opened it. A request that breaks
// off (an error, a timeout, its coroutine cancelled) closes its connection rather than
// returning it to the pool, so the server sees the request abandoned.
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "http/sse.h"

namespace moe::http {

struct Url {
  std::string host;
  std::string port;  // "80" when the URL gives none
  std::string path;  // the base path, without a trailing '/': "" or e.g. "/api"
  std::string str() const;
};

// "http://host[:port][/path]"; throws moe::Error for anything else (https included).
Url parse_url(std::string_view url);

// The server could not be reached (resolve or connect failed): nothing was sent, so the
// request may be tried again.
class ConnectError : public Error {
 public:
  using Error::Error;
};

struct HttpRequest {
  std::string method = "POST";
  std::string target;  // appended to the base URL's path, e.g. "/v1/completions"
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // e.g. {"Authorization", "Bearer K"}
};

struct HttpResponse {
  int status = 0;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;       // empty when the events went to the handler
  bool streamed = false;  // the body was an event stream given to the handler
};

using Clock = std::chrono::steady_clock;

// Called for each event of a stream with the time the read that completed it returned.
// Return false to stop reading: the connection is then closed rather than reused.
using EventHandler = std::function<bool(const SseEvent&, Clock::time_point)>;
// Called once for each read that completed events, with them all: a caller that forwards
// them can do so in one write, in the reading coroutine. Return false to stop reading, as
// above.
using EventBatchHandler = std::function<boost::asio::awaitable<bool>(std::vector<SseEvent>&, Clock::time_point)>;

struct HttpClientOptions {
  // The longest wait for the next bytes (connecting, sending, or between reads).
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(10)};
  size_t max_idle_connections = 256;
};

class HttpClient {
 public:
  explicit HttpClient(Url base, HttpClientOptions options = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // The whole response, whatever its status. Throws ConnectError when the server cannot be
  // reached and moe::Error when the exchange breaks or times out.
  boost::asio::awaitable<HttpResponse> fetch(HttpRequest request);

  // Asks for text/event-stream. A 2xx answer of that type goes event by event to
  // on_event; any other answer comes back whole, as from fetch(), for the caller to report.
  boost::asio::awaitable<HttpResponse> stream(HttpRequest request, EventHandler on_event);
  boost::asio::awaitable<HttpResponse> stream_batches(HttpRequest request, EventBatchHandler on_events);

  const Url& base() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with requests in flight, which may outlive this
};

}  // namespace moe::http
