#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

namespace moe {
namespace {

// Per-thread match state. The JIT stack is larger than PCRE2's 32 KiB default because
// patterns such as \s+(?!\S) backtrack over whole whitespace runs, which can be long.
struct Scratch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  Scratch() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~Scratch() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

Regex::Regex(std::string pattern) : pattern_(std::move(pattern)) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (!code) fail("pre-tokenizer regex '{}': {} at offset {}", pattern_, pcre2_message(err), offset);
  // JIT is an optimisation: where the platform lacks it PCRE2 interprets the same pattern.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

bool Regex::find(std::string_view subject, size_t start, size_t& begin, size_t& end) const {
  Scratch& s = scratch();
  const int rc = pcre2_match(static_cast<pcre2_code*>(code_), reinterpret_cast<PCRE2_SPTR>(subject.data()),
                             subject.size(), start, PCRE2_NO_UTF_CHECK, s.data, s.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  // rc == 0 only says the one-pair vector had no room for capture groups; the whole match is there.
  if (rc < 0) fail("pre-tokenizer regex '{}': {}", pattern_, pcre2_message(rc));
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
  begin = ov[0];
  end = ov[1];
  return true;
}

}  // namespace moe
