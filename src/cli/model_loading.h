#pragma once
// Loading a model for a command, with a progress bar and a one-line summary on stderr, and
// the options every command that loads one shares.
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "model/model.h"

namespace moe::cli {

struct ModelArgs {
  std::string path;
  std::string weight_type = "auto";
};

// --model/-m (a GGUF file or a Hugging Face checkpoint directory) and --weight-type.
void add_model_options(CLI::App& cmd, ModelArgs& args);

// read_routed_experts: false for an expert-parallel rank, which reads its own experts once
// it knows them.
std::unique_ptr<Model> load_model_with_progress(const ModelArgs& args, bool read_routed_experts = true);
// VmRSS of this process in MiB (0 where /proc is not there): what the loaded model holds in
// memory, mapped file pages included.
double resident_mib();

}  // namespace moe::cli
