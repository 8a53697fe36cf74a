#pragma once
// Server-Sent Events (the WHATWG "text/event-stream" format) parsed incrementally: bytes go
// in as they arrive, in reads of any size, and complete events come out.
#include <functional>
#include <string>
#include <string_view>

namespace moe::http {

struct SseEvent {
  std::string event;  // the "event:" field; empty means "message"
  std::string data;   // "data:" lines joined with '\n'
  std::string id;
};

class SseParser {
 public:
  // Returns false from the callback to stop: the rest of the bytes given to this feed() are
  // dropped and stopped() turns true.
  using Handler = std::function<bool(const SseEvent&)>;

  // Parses `bytes`, calling `on_event` for each event completed by them (an event ends at
  // a blank line). Lines may end in "\n", "\r\n" or "\r", split anywhere across calls.
  void feed(std::string_view bytes, const Handler& on_event);
  bool stopped() const { return stopped_; }

 private:
  bool line(std::string_view text, const Handler& on_event);

  std::string partial_;  // a line whose end has not arrived yet
  SseEvent pending_;
  bool has_data_ = false;
  bool after_cr_ = false;  // the last byte was '\r': a following '\n' belongs to it
  bool started_ = false;   // past a possible UTF-8 byte-order mark
  bool stopped_ = false;
};

}  // namespace moe::http
