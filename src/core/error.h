#pragma once
// Errors are exceptions carrying a complete, user-facing message: the CLI prints them as
// they are, the server turns them into API errors. Format with fmt at the throw site.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace moe {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// An error already shown to the user (by every rank of a group, say): the command ends with
// status 1 without printing it again.
class ReportedError : public Error {
 public:
  using Error::Error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace moe
