#pragma once
// --chat-template, as serve and proxy take it: a file, or (as vLLM's does) the template
// text itself.
#include <string>

namespace moe::cli {

// The template text; "" for an empty argument. Throws moe::Error when the argument is
// neither a readable file nor template text.
std::string chat_template_source(const std::string& arg);

}  // namespace moe::cli
