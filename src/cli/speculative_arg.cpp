#include "cli/speculative_arg.h"

namespace moe::cli {

void add_speculative_option(CLI::App& cmd, SpeculativeConfig& out) {
  cmd.add_option_function<std::string>(
         "--speculative-config",
         [&out](const std::string& s) { out = parse_speculative_config(s); },
         "Speculative decoding as a JSON object, e.g. '{\"method\": \"ngram\", \"num_speculative_tokens\": 3, "
         "\"prompt_lookup_max\": 4}' (docs/speculative.md)")
      ->type_name("JSON");
}

}  // namespace moe::cli
