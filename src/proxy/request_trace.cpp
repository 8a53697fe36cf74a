#include "proxy/request_trace.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <cstdio>

#include "core/error.h"

namespace moe::proxy {

RequestTrace::RequestTrace(std::string id, Api api, bool stream, http::Clock::time_point arrived)
    : id_(std::move(id)), api_(api), stream_(stream), arrived_(arrived), arrived_wall_(std::chrono::system_clock::now()) {}

double RequestTrace::ms_since_arrival(http::Clock::time_point t) const {
  return std::chrono::duration<double, std::milli>(t - arrived_).count();
}

void RequestTrace::mark(const std::string& event, Json fields) {
  fields["event"] = event;
  fields["at_ms"] = ms_since_arrival(http::Clock::now());
  events_.push_back(std::move(fields));
}

void RequestTrace::prefill_done() {
  if (prefill_done_) return;
  prefill_done_ = http::Clock::now();
  mark("prefill_done");
}

void RequestTrace::decode_started() {
  if (decode_started_) return;
  decode_started_ = http::Clock::now();
  mark("decode_started");
}

void RequestTrace::first_token() {
  if (first_token_) return;
  first_token_ = http::Clock::now();
  mark("first_token");
}

void RequestTrace::text_sent(http::Clock::time_point at) {
  if (!first_text_) first_text_ = at;
  last_text_ = at;
  ++texts_;
}

std::optional<double> RequestTrace::tpot_s() const {
  if (texts_ < 2) return std::nullopt;
  return std::chrono::duration<double>(*last_text_ - *first_text_).count() / double(texts_ - 1);
}

void RequestTrace::note_usage(const Json& answer) {
  const Json* usage = member(answer, "usage");
  const Json* details = usage ? member(*usage, "completion_tokens_details") : nullptr;
  const Json* accepted = details ? member(*details, "accepted_prediction_tokens") : nullptr;
  const Json* rejected = details ? member(*details, "rejected_prediction_tokens") : nullptr;
  if (!accepted || !rejected || !accepted->is_number_integer() || !rejected->is_number_integer()) return;
  spec_decode_ = {{"accepted", *accepted}, {"rejected", *rejected}};
}

Json RequestTrace::line() const {
  const auto wall = std::chrono::time_point_cast<std::chrono::milliseconds>(arrived_wall_);
  Json line{{"id", id_},
            {"received", fmt::format("{:%Y-%m-%dT%H:%M:%S}Z", wall)},
            {"api", api_ == Api::kChat ? "chat" : "completion"},
            {"stream", stream_},
            {"status", status_},
            {"total_ms", ms_since_arrival(http::Clock::now())},
            {"events", events_}};
  if (!spec_decode_.is_null()) line["spec_decode"] = spec_decode_;
  return line;
}

AccessLog::AccessLog(const std::string& path) : to_stdout_(path == "-") {
  if (to_stdout_) return;
  file_.open(path, std::ios::app);
  if (!file_) fail("cannot open the access log {} for appending", path);
}

void AccessLog::write(const Json& line) {
  const std::string text = line.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::lock_guard lock(mu_);
  if (to_stdout_) {
    std::fprintf(stdout, "%s\n", text.c_str());
    std::fflush(stdout);
    return;
  }
  file_ << text << '\n';
  file_.flush();
}

}  // namespace moe::proxy
