#pragma once
// Loading a model for a command, with a progress bar and a one-line summary on stderr.
#include <memory>
#include <string>

#include "model/model.h"

namespace moe::cli {

std::unique_ptr<Model> load_model_with_progress(const std::string& path);

}  // namespace moe::cli
