#pragma once
// --speculative-config, as serve, generate and bench model take it (vLLM's JSON spelling).
#include <CLI/CLI.hpp>

#include "engine/speculative.h"

namespace moe::cli {

// Adds --speculative-config to `cmd`, parsed into `out` (unchanged when the flag is not
// given); a bad object throws moe::Error naming the field.
void add_speculative_option(CLI::App& cmd, SpeculativeConfig& out);

}  // namespace moe::cli
