#include "tokenizer/stream_decoder.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace moe {

std::string utf8_sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_sequence_length(s, i);
    if (len > 0) {
      out.append(s.substr(i, len));
      i += len;
      continue;
    }
    // One U+FFFD per maximal ill-formed subsequence: the longest prefix at i that could
    // still have become a character (or the single byte, if none could).
    size_t j = i + 1;
    for (size_t k = std::min<size_t>(3, s.size() - i); k >= 1; --k) {
      if (utf8_incomplete_tail(s.substr(i, k)) == k) {
        j = i + k;
        break;
      }
    }
    out += "\xef\xbf\xbd";
    i = j;
  }
  return out;
}

std::string StreamDecoder::push(int32_t id) {
  if (skip_special_ && tok_.is_special(id)) return "";
  pending_ += tok_.token_bytes(id);
  const size_t hold = utf8_incomplete_tail(pending_);
  std::string out = utf8_sanitize(std::string_view(pending_).substr(0, pending_.size() - hold));
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out = utf8_sanitize(pending_);
  pending_.clear();
  return out;
}

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

StopMatcher::Result StopMatcher::push(std::string_view text) {
  Result r;
  if (done_) return r;
  held_ += text;
  size_t best = std::string::npos;
  for (size_t k = 0; k < stops_.size(); ++k) {
    const size_t at = held_.find(stops_[k]);
    if (at < best) {
      best = at;
      r.which = k;
    }
  }
  if (best != std::string::npos) {
    r.text = held_.substr(0, best);
    r.stopped = done_ = true;
    held_.clear();
    return r;
  }
  // Keep the longest tail that some stop string starts with.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    for (size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  r.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return r;
}

std::string StopMatcher::finish() {
  std::string out = done_ ? std::string() : held_;
  held_.clear();
  return out;
}

}  // namespace moe
