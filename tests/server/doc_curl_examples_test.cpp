// Every curl example in the README and docs/ that calls the OpenAI API runs as written
// against real servers: the lines are taken from the Markdown files, only their
// host:port is pointed at the servers this test starts (tiny model), and each must
// answer 200 with a body of the kind it asked for.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/run_cli.h"
#include "support/serve_process.h"

namespace moe {
namespace {

using nlohmann::json;
using testing::ServeProcess;

std::string dir() { return testing::test_dir("doc_curl_examples_test"); }

struct Example {
  std::string file;
  int line = 0;
  std::string command;  // continuation lines joined
};

// The curl commands of a Markdown file's sh code blocks, with `\` continuations joined.
std::vector<Example> curl_examples(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<Example> out;
  std::string line;
  bool in_sh = false;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.rfind("```", 0) == 0) {
      in_sh = !in_sh && line.substr(3) == "sh";
      continue;
    }
    if (!in_sh || line.rfind("curl ", 0) != 0) continue;
    Example e{path.filename().string(), n, ""};
    // A command goes on after a trailing backslash, and inside a quoted string.
    std::string part = line;
    for (;;) {
      const bool escaped = !part.empty() && part.back() == '\\';
      e.command += escaped ? part.substr(0, part.size() - 1) : part;
      if (!escaped && std::count(e.command.begin(), e.command.end(), '\'') % 2 == 0) break;
      if (!escaped) e.command += '\n';
      if (!std::getline(in, part)) break;
      ++n;
    }
    out.push_back(e);
  }
  return out;
}

std::vector<Example> all_examples() {
  const std::filesystem::path root = MOE_SOURCE_DIR;
  std::vector<Example> out = curl_examples(root / "README.md");
  for (const auto& entry : std::filesystem::directory_iterator(root / "docs")) {
    if (entry.path().extension() != ".md") continue;
    std::vector<Example> more = curl_examples(entry.path());
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

std::string model_path() {
  const std::string path = dir() + "/tiny.gguf";
  if (!std::filesystem::exists(path)) {
    const testing::CliResult r = testing::run_moengine("gen-model --arch deepseek2 --preset tiny --type q8_0 --out " + path);
    if (r.status != 0) throw std::runtime_error("gen-model failed: " + r.out);
  }
  return path;
}

class DocCurlExamples : public ::testing::Test {
 protected:
  // A unified server answering to `name` ("" keeps serve's default, the model path).
  std::string unified(const std::string& name) {
    auto& url = by_name_[name];
    if (url.empty()) {
      std::vector<std::string> args{"--model", model_path(), "--port", "0", "--kv-cache-memory", "0.05"};
      if (!name.empty()) args.insert(args.end(), {"--served-model-name", name});
      url = start(args, "serve", "serve-" + (name.empty() ? "default" : name));
    }
    return url;
  }

  // The README's P/D pair behind its proxy, as its commands start them.
  std::string proxy() {
    if (proxy_url_.empty()) {
      const std::vector<std::string> common{"--model", model_path(), "--port", "0", "--kv-cache-memory", "0.05"};
      std::vector<std::string> p = common, d = common;
      p.insert(p.end(), {"--role", "prefill"});
      d.insert(d.end(), {"--role", "decode"});
      const std::string p_url = start(p, "serve", "prefill"), d_url = start(d, "serve", "decode");
      proxy_url_ = start({"--port", "0", "--prefill", p_url, "--decode", d_url}, "proxy", "proxy");
    }
    return proxy_url_;
  }

  std::string start(const std::vector<std::string>& args, const std::string& command, const std::string& name) {
    processes_.push_back(std::make_unique<ServeProcess>(args, dir() + "/" + name + ".log", command));
    const std::string url = processes_.back()->url();
    if (url.empty()) throw std::runtime_error(name + " did not start: " + processes_.back()->log());
    return url;
  }

  // Where an example's host:port is served here: the README's proxy port goes to the P/D
  // proxy, everything else to a unified server answering to the model the body names.
  std::string target(const Example& e) {
    static const std::regex model_field(R"re("model"\s*:\s*"([^"]*)")re");
    std::smatch m;
    if (e.file == "README.md" && e.command.find(":8300/") != std::string::npos) return proxy();
    return unified(std::regex_search(e.command, m, model_field) ? m[1].str() : "");
  }

 private:
  std::vector<std::unique_ptr<ServeProcess>> processes_;
  std::map<std::string, std::string> by_name_;
  std::string proxy_url_;
};

TEST_F(DocCurlExamples, EveryApiExampleAnswersAsWritten) {
  static const std::regex host_port(R"((http://)?(localhost|127\.0\.0\.1):[0-9]+)");
  int ran = 0;
  for (const Example& e : all_examples()) {
    // The admin and expert-trace examples need an admin key or an EP group; their
    // endpoints have tests of their own (proxy_admin_test, ep_serve_test).
    if (e.command.find("/v1/") == std::string::npos && e.command.find("/tokenize") == std::string::npos) continue;
    SCOPED_TRACE(e.file + ":" + std::to_string(e.line) + ": " + e.command);
    const std::string command = std::regex_replace(e.command, host_port, target(e));
    const std::string body = dir() + "/answer.txt";
    const testing::CliResult r = testing::run_command(command + " -sS -o " + body + " -w '%{http_code}'");
    ASSERT_EQ(r.status, 0);
    std::ifstream in(body);
    std::stringstream answer;
    answer << in.rdbuf();
    ASSERT_EQ(r.out, "200") << answer.str();
    const std::string text = answer.str();
    if (text.rfind("data: ", 0) == 0) {
      EXPECT_NE(text.find("data: [DONE]"), std::string::npos) << text;
    } else {
      const json j = json::parse(text);
      EXPECT_TRUE(j.contains("choices") || j.contains("tokens")) << text;
    }
    ++ran;
  }
  // README (2), api.md (3), cli.md (3), deployment.md, disaggregation.md, expert-parallel.md.
  EXPECT_GE(ran, 11);
}

}  // namespace
}  // namespace moe
