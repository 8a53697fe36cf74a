#pragma once
// Each subcommand lives in its own cmd_*.cpp and registers itself here; its callback runs
// the command and throws moe::Error for the user to read.
#include <CLI/CLI.hpp>

namespace moe::cli {

void register_gen_model(CLI::App& app);
void register_generate(CLI::App& app);
void register_bench_model(CLI::App& bench);
void register_bench_serve(CLI::App& bench);
void register_bench_kv_transfer(CLI::App& bench);
void register_bench_kv_accuracy(CLI::App& bench);
void register_tokenize(CLI::App& app);
void register_placement(CLI::App& app);
void register_serve(CLI::App& app);
void register_convert(CLI::App& app);
void register_proxy(CLI::App& app);
void register_launch(CLI::App& app);
void register_sim(CLI::App& app);
CLI::App* register_sim_calibrate(CLI::App& sim);  // moengine sim calibrate, under `sim`

inline void register_commands(CLI::App& app) {
  register_gen_model(app);
  register_convert(app);
  register_generate(app);
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks: a model file's speed (model), a server under load (serve), KV transports (kv-transfer), KV dtypes' accuracy (kv-accuracy)");
  bench->require_subcommand(1);
  register_bench_model(*bench);
  register_bench_serve(*bench);
  register_bench_kv_transfer(*bench);
  register_bench_kv_accuracy(*bench);
  register_tokenize(app);
  register_placement(app);
  register_serve(app);
  register_proxy(app);
  register_launch(app);
  register_sim(app);
}

}  // namespace moe::cli
