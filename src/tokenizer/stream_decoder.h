#pragma once
// Text for streaming: token ids arrive one at a time, and what is sent to a client must
// always be whole UTF-8 (a Chinese character or an emoji often spans two or three byte
// tokens), and must stop before a stop string even when that string spans tokens.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moe {

class Tokenizer;

// Bytes that are not (the start of) well-formed UTF-8 become U+FFFD, one per maximal
// ill-formed subsequence, as Python's and JavaScript's decoders do.
std::string utf8_sanitize(std::string_view bytes);

class StreamDecoder {
 public:
  // skip_special: control tokens (EOS, chat markers) add no text.
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = true) : tok_(tok), skip_special_(skip_special) {}

  // Adds one token; returns the text that is now complete (possibly empty). An incomplete
  // UTF-8 sequence at the end is held back until the bytes that finish it arrive.
  std::string push(int32_t id);
  // End of stream: what was held back, with an unfinished sequence as U+FFFD.
  std::string finish();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;
};

// Finds stop strings in streamed text. Text that could be the start of a stop string is
// held back until it is known not to be; the stop string itself is never emitted.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  struct Result {
    std::string text;      // safe to emit now
    bool stopped = false;  // a stop string was found; text ends right before it
    size_t which = 0;      // index of the stop string found
  };
  Result push(std::string_view text);
  // End of stream without a stop: the text still held back.
  std::string finish();

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool done_ = false;
};

}  // namespace moe
