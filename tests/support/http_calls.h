#pragma once
// Blocking HTTP calls for tests that drive servers in child processes: one request on a
// fresh io_context, the whole answer (or every SSE event) back.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "http/http_client.h"

namespace moe::testing {

struct Reply {
  int status = 0;
  std::string body;
  nlohmann::json json() const { return nlohmann::json::parse(body); }
};

inline Reply http_call(const std::string& base_url, const std::string& method, const std::string& path, const std::string& body,
                       std::vector<std::string>* events = nullptr, std::chrono::seconds timeout = std::chrono::seconds(60)) {
  namespace asio = boost::asio;
  asio::io_context io;
  http::HttpClient client(http::parse_url(base_url), http::HttpClientOptions{timeout});
  http::HttpRequest req;
  req.method = method;
  req.target = path;
  req.body = body;
  Reply reply;
  std::exception_ptr failure;
  auto run = [&]() -> asio::awaitable<void> {
    http::HttpResponse r;
    if (events) {
      r = co_await client.stream(std::move(req), [events](const http::SseEvent& e, http::Clock::time_point) {
        events->push_back(e.data);
        return true;
      });
    } else {
      r = co_await client.fetch(std::move(req));
    }
    reply.status = r.status;
    reply.body = r.body;
  };
  asio::co_spawn(io, run(), [&](std::exception_ptr e) { failure = e; });
  io.run();
  if (failure) std::rethrow_exception(failure);
  return reply;
}

inline Reply post_json(const std::string& base_url, const std::string& path, const nlohmann::json& body) {
  return http_call(base_url, "POST", path, body.dump());
}

inline Reply get(const std::string& base_url, const std::string& path) { return http_call(base_url, "GET", path, ""); }

// The value of one sample in a Prometheus text page ("name{labels} value"), the labels
// given exactly as the page spells them after model_name; -1 when absent.
inline double metric(const std::string& page, const std::string& name, const std::string& extra_labels = "") {
  const std::string key = "moengine:" + name + "{";
  for (size_t at = page.find(key); at != std::string::npos; at = page.find(key, at + 1)) {
    const size_t close = page.find("} ", at);
    const std::string labels = page.substr(at + key.size(), close - at - key.size());
    const bool match = extra_labels.empty() ? labels.find(',') == std::string::npos : labels.find("," + extra_labels) != std::string::npos;
    if (match) return std::stod(page.substr(close + 2, page.find('\n', close) - close - 2));
  }
  return -1;
}

}  // namespace moe::testing
