#include "cli/chat_template_arg.h"

#include <fstream>
#include <iterator>

#include "core/error.h"

namespace moe::cli {

std::string chat_template_source(const std::string& arg) {
  if (arg.empty()) return "";
  std::ifstream in(arg, std::ios::binary);
  if (in) return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (arg.find("{{") != std::string::npos || arg.find("{%") != std::string::npos) return arg;
  fail("--chat-template: cannot open '{}' (and it is not template text)", arg);
}

}  // namespace moe::cli
