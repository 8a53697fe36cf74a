#pragma once
// What the P/D process tests share: the tiny model generated once into a test's folder, a
// `moengine` child started and waited for (its log in that folder), and prompts of many
// words for prompts of many KV blocks.
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/run_cli.h"
#include "support/serve_process.h"

namespace moe::testing {

// DIR/tiny.gguf, generated on first use.
// The tiny deepseek2 file (with_mtp: with an MTP layer), made once in dir.
inline std::string tiny_model(const std::string& dir, bool with_mtp = false) {
  const std::string path = dir + (with_mtp ? "/tiny-mtp.gguf" : "/tiny.gguf");
  if (!std::filesystem::exists(path)) {
    const CliResult r = run_moengine("gen-model --arch deepseek2 --preset tiny --type q8_0 --out " + path +
                                     (with_mtp ? " --nextn-layers 1" : ""));
    if (r.status != 0) throw std::runtime_error(r.out);
  }
  return path;
}

// `moengine COMMAND ARGS...`, ready (its log is DIR/NAME.log); throws with the log otherwise.
inline std::unique_ptr<ServeProcess> start_ready(const std::string& dir, const std::string& command, const std::string& name,
                                                 const std::vector<std::string>& args) {
  auto p = std::make_unique<ServeProcess>(args, dir + "/" + name + ".log", command);
  if (p->url().empty()) throw std::runtime_error(name + " never became ready:\n" + p->log());
  return p;
}

// About n words from a small vocabulary, different for each salt.
inline std::string words(int n, int salt) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    s += 'w';
    s += std::to_string((i * 7919 + salt) % 97);
    s += ' ';
  }
  return s;
}

}  // namespace moe::testing
