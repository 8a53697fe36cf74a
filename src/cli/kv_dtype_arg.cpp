#include "cli/kv_dtype_arg.h"

#include <fmt/format.h>

#include "core/error.h"

namespace moe::cli {

void add_kv_dtype_option(CLI::App& cmd, KvDtype& out) {
  cmd.add_option_function<std::string>(
         "--kv-cache-dtype",
         [&out](const std::string& s) {
           const std::optional<KvDtype> d = parse_kv_dtype(s);
           if (!d) fail("--kv-cache-dtype: '{}' is not one of {}", s, kKvDtypeChoices);
           out = *d;
         },
         fmt::format("How the KV cache stores its rows: {} (default auto = {}; docs/engine.md)", kKvDtypeChoices,
                     kv_dtype_name(kKvDtypeAuto)))
      ->type_name("DTYPE");
}

}  // namespace moe::cli
