// The moengine binary: one subcommand per job, the way `vllm serve` / `vllm bench` work.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <new>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"moengine: serves Mixture-of-Experts language models (DeepSeek-V3/R1, Qwen3-MoE)"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  moe::cli::register_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const moe::ReportedError&) {
    return 1;
  } catch (const moe::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    // A bug, not bad input (that is moe::Error), but still a message rather than an abort.
    std::fprintf(stderr, "error: unexpected failure: %s\n", e.what());
    return 1;
  }
  return 0;
}
