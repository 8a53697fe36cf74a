#pragma once
// A request's lifecycle as the proxy sees it: when it arrived, each leg's routing (instance,
// policy reason), retries, the prefill instance's hand-off, the decode instance's first
// event, the client's first token, resumes, and how it ended. Written as one JSON line to
// the access log (--access-log) and timed into /metrics' phase histograms.
#include <chrono>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>

#include "http/http_client.h"
#include "proxy/merge.h"

namespace moe::proxy {

class RequestTrace {
 public:
  RequestTrace(std::string id, Api api, bool stream, http::Clock::time_point arrived);

  // One event, with its fields ({"leg": "prefill", "instance": "p0", ...}).
  void mark(const std::string& event, Json fields = Json::object());
  // The first time each of these happens (later calls are ignored).
  void prefill_done();
  void decode_started();
  void first_token();
  // A client-visible text event of a stream at `at` (the first is also first_token()).
  void text_sent(http::Clock::time_point at);

  // The answer's usage object (or an event carrying one): with speculative decoding its
  // completion_tokens_details give the line's spec_decode {accepted, rejected} drafts.
  void note_usage(const Json& answer);

  // The HTTP status the client got (the last one set; 499 until then: the client left).
  void set_status(int status) { status_ = status; }
  int status() const { return status_; }

  // The log line, once the request has ended.
  Json line() const;

  http::Clock::time_point arrived() const { return arrived_; }
  const Json& events() const { return events_; }
  std::optional<http::Clock::time_point> prefill_done_at() const { return prefill_done_; }
  std::optional<http::Clock::time_point> decode_started_at() const { return decode_started_; }
  std::optional<http::Clock::time_point> first_token_at() const { return first_token_; }
  // The stream's mean time per text event after the first (tokens, as serve sends one per
  // event); nullopt with fewer than two.
  std::optional<double> tpot_s() const;

 private:
  double ms_since_arrival(http::Clock::time_point t) const;

  std::string id_;
  Api api_;
  bool stream_;
  http::Clock::time_point arrived_;
  std::chrono::system_clock::time_point arrived_wall_;
  Json events_ = Json::array();
  std::optional<http::Clock::time_point> prefill_done_, decode_started_, first_token_;
  std::optional<http::Clock::time_point> first_text_, last_text_;
  int64_t texts_ = 0;
  Json spec_decode_;
  int status_ = 499;
};

// JSON lines, one per finished request, appended to a file ("-": stdout). Thread-safe.
class AccessLog {
 public:
  // Throws moe::Error naming the file when it cannot be opened.
  explicit AccessLog(const std::string& path);
  void write(const Json& line);

 private:
  std::mutex mu_;
  std::ofstream file_;
  bool to_stdout_ = false;
};

}  // namespace moe::proxy
