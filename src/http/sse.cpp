#include "http/sse.h"

namespace moe::http {

void SseParser::feed(std::string_view bytes, const Handler& on_event) {
  if (stopped_) return;
  if (!started_) {
    // The byte-order mark may itself be split across reads; wait for three bytes.
    const std::string_view bom = "\xEF\xBB\xBF";
    partial_.append(bytes);
    if (partial_.size() < bom.size() && bom.starts_with(partial_)) return;
    started_ = true;
    std::string head = std::move(partial_);
    partial_.clear();
    if (std::string_view(head).starts_with(bom)) head.erase(0, bom.size());
    feed(head, on_event);
    return;
  }
  size_t begin = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (c != '\n' && c != '\r') {
      after_cr_ = false;
      continue;
    }
    if (c == '\n' && after_cr_) {
      // The '\n' of a "\r\n" whose '\r' ended the previous line.
      after_cr_ = false;
      begin = i + 1;
      continue;
    }
    after_cr_ = c == '\r';
    bool go_on;
    if (partial_.empty()) {
      go_on = line(bytes.substr(begin, i - begin), on_event);
    } else {
      partial_.append(bytes.substr(begin, i - begin));
      const std::string whole = std::move(partial_);
      partial_.clear();
      go_on = line(whole, on_event);
    }
    begin = i + 1;
    if (!go_on) {
      stopped_ = true;
      return;
    }
  }
  partial_.append(bytes.substr(begin));
}

bool SseParser::line(std::string_view text, const Handler& on_event) {
  if (text.empty()) {
    if (!has_data_) {
      pending_ = {};
      return true;
    }
    const SseEvent event = std::move(pending_);
    pending_ = {};
    has_data_ = false;
    return on_event(event);
  }
  if (text.front() == ':') return true;  // a comment, often a keep-alive
  const size_t colon = text.find(':');
  const std::string_view field = text.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? std::string_view() : text.substr(colon + 1);
  if (value.starts_with(' ')) value.remove_prefix(1);
  if (field == "data") {
    if (has_data_) pending_.data.push_back('\n');
    pending_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    pending_.event.assign(value);
  } else if (field == "id") {
    pending_.id.assign(value);
  }
  return true;
}

}  // namespace moe::http
