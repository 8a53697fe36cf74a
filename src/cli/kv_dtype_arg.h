#pragma once
// --kv-cache-dtype, as serve, generate and bench model take it.
#include <CLI/CLI.hpp>

#include "kernels/kv_format.h"

namespace moe::cli {

// Adds --kv-cache-dtype to `cmd`, writing the choice to `out` (which keeps its value when
// the flag is not given); a name that is not a dtype throws moe::Error listing them.
void add_kv_dtype_option(CLI::App& cmd, KvDtype& out);

}  // namespace moe::cli
