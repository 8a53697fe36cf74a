#pragma once
// A compiled PCRE2 pattern (UTF, Unicode properties, JIT) for pre-tokenizer splits. The
// compiled code is shared and immutable; each thread keeps its own match scratch, so one
// Regex may be used from many threads at once.
#include <cstddef>
#include <string>
#include <string_view>

namespace moe {

class Regex {
 public:
  // Throws moe::Error naming the pattern and the offset of the problem.
  explicit Regex(std::string pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Finds the first match in subject at or after `start`; sets [begin, end). The subject
  // must be valid UTF-8 (not re-checked: callers split invalid bytes off first), and
  // lookarounds see all of it, so pass the whole piece being split, not a tail of it.
  bool find(std::string_view subject, size_t start, size_t& begin, size_t& end) const;

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace moe
