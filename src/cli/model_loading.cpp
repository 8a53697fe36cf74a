#include "cli/model_loading.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "cli/progress.h"

namespace moe::cli {

std::unique_ptr<Model> load_model_with_progress(const std::string& path) {
  const auto start = std::chrono::steady_clock::now();
  ProgressBar bar("loading " + path);
  auto model = Model::load(path, [&](double f) { bar.update(f); });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  bar.done(fmt::format("{:.0f} MiB in {:.1f} s", double(model->total_weight_bytes()) / 1048576.0, secs));
  std::fprintf(stderr, "model: %s\n", model->config().summary().c_str());
  return model;
}

}  // namespace moe::cli
