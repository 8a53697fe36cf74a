#pragma once
// Each subcommand lives in its own cmd_*.cpp and registers itself here; its callback runs
// the command and throws moe::Error for the user to read.
#include <CLI/CLI.hpp>

namespace moe::cli {

void register_gen_model(CLI::App& app);
void register_generate(CLI::App& app);
void register_bench(CLI::App& app);
void register_tokenize(CLI::App& app);

inline void register_commands(CLI::App& app) {
  register_gen_model(app);
  register_generate(app);
  register_bench(app);
  register_tokenize(app);
}

}  // namespace moe::cli
