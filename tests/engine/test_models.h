#pragma once
// Writes generated models into the test's scratch folder once per process.
#include <cstdlib>
#include <filesystem>
#include <string>

#include "gen/gen_model.h"

namespace moe::testing {

inline std::string scratch_dir() {
  const char* env = std::getenv("MOENGINE_TEST_TMP");
  std::filesystem::path dir = env ? env : std::filesystem::temp_directory_path() / "moengine-tests";
  std::filesystem::create_directories(dir);
  return dir.string();
}

inline std::string write_model(const GenSpec& spec, const std::string& name) {
  const std::string path = scratch_dir() + "/" + name + ".gguf";
  write_generated_model(spec, path);
  return path;
}

}  // namespace moe::testing
