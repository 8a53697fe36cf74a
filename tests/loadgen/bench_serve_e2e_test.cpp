// `moengine bench serve` against a real `moengine serve` on a tiny generated model: both
// endpoints streamed, every request completed with exactly --output-len tokens
// (ignore_eos), latencies positive and consistent, Poisson arrivals with goodput.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "support/run_cli.h"

namespace {

std::string bin() {
  const char* b = std::getenv("MOENGINE_BIN");
  return b ? b : "moengine";
}

std::string tmp_dir() {
  const char* t = std::getenv("MOENGINE_TEST_TMP");
  const auto dir = std::filesystem::path(t ? t : "/tmp") / "bench-serve-e2e";
  std::filesystem::create_directories(dir);
  return dir.string();
}

using CmdResult = moe::testing::CliResult;

CmdResult run(const std::string& cmd) { return moe::testing::run_command(cmd); }

// `moengine serve` on a free port; its URL is read from the line it prints when ready.
class Server {
 public:
  explicit Server(const std::string& model) {
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      close(out[1]);
      const std::string exe = bin();
      // A template that just concatenates the messages: the generated model has none.
      execl(exe.c_str(), exe.c_str(), "serve", "--model", model.c_str(), "--host", "127.0.0.1", "--port", "0",
            "--threads", "1", "--served-model-name", "tiny", "--chat-template",
            "{% for m in messages %}{{ m.content }}{% endfor %}", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(out[1]);
    FILE* f = fdopen(out[0], "r");
    std::array<char, 512> line;
    while (f && fgets(line.data(), int(line.size()), f)) {
      const std::string s = line.data();
      const size_t at = s.find("http://");
      if (s.starts_with("serving ") && at != std::string::npos) {
        url_ = s.substr(at, s.find_first_of(" \r\n", at) - at);
        break;
      }
    }
    stdout_ = f;
  }
  ~Server() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int st;
      waitpid(pid_, &st, 0);
    }
    if (stdout_) fclose(stdout_);
  }
  const std::string& url() const { return url_; }

 private:
  pid_t pid_ = -1;
  FILE* stdout_ = nullptr;
  std::string url_;
};

class BenchServe : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = tmp_dir() + "/tiny.gguf";
    const CmdResult g = run(bin() + " gen-model --arch deepseek2 --preset tiny --type q8_0 --out " + model_ + " 2>&1");
    ASSERT_EQ(g.status, 0) << g.out;
    server_ = new Server(model_);
    ASSERT_FALSE(server_->url().empty()) << "moengine serve did not print its URL";
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  static nlohmann::json bench(const std::string& args) {
    const CmdResult r = run(bin() + " bench serve --base-url " + server_->url() + " " + args + " --json 2>/dev/null");
    EXPECT_EQ(r.status, 0) << r.out;
    return nlohmann::json::parse(r.out, nullptr, false);
  }

  static std::string model_;
  static Server* server_;
};
std::string BenchServe::model_;
Server* BenchServe::server_ = nullptr;

void expect_sane_latencies(const nlohmann::json& j) {
  for (const char* m : {"ttft", "tpot", "itl", "e2el"}) {
    const std::string k = m;
    const double mean = j["mean_" + k + "_ms"], median = j["median_" + k + "_ms"], p99 = j["p99_" + k + "_ms"];
    EXPECT_GT(mean, 0) << k;
    // Chunks that arrive in one read are 0 ms apart, so only ITL's median may be 0.
    if (k == "itl") {
      EXPECT_GE(median, 0);
    } else {
      EXPECT_GT(median, 0) << k;
    }
    EXPECT_LE(median, p99) << k;
  }
  EXPECT_LT(j["mean_ttft_ms"].get<double>(), j["mean_e2el_ms"].get<double>());
  EXPECT_LT(j["mean_tpot_ms"].get<double>(), j["mean_e2el_ms"].get<double>());
  EXPECT_GT(j["duration"].get<double>(), 0);
  EXPECT_GT(j["output_throughput"].get<double>(), 0);
}

TEST_F(BenchServe, CompletionsWithTokenIdsGenerateExactlyOutputLen) {
  const auto j = bench("--endpoint /v1/completions --input-len 24 --output-len 12 --num-prompts 6 "
                       "--max-concurrency 3 --vocab-size 512 --save-detailed");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["model_id"], "tiny");  // asked of the server
  EXPECT_EQ(j["completed"], 6);
  EXPECT_EQ(j["failed"], 0);
  EXPECT_EQ(j["total_output_tokens"], 6 * 12);
  EXPECT_EQ(j["total_input_tokens"], 6 * 24);  // token ids: the prompt length is exact
  EXPECT_LE(j["max_concurrent_requests"].get<int>(), 3);
  // One gap between each two chunks with text; a token whose text is incomplete UTF-8
  // comes with the next one, so there may be fewer.
  for (const auto& itl : j["itls"]) EXPECT_LE(itl.size(), 11u);
  expect_sane_latencies(j);
}

TEST_F(BenchServe, ChatWithWordPrompts) {
  const auto j = bench("--endpoint /v1/chat/completions --input-len 16 --output-len 10 --num-prompts 4 "
                       "--max-concurrency 2");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["completed"], 4);
  EXPECT_EQ(j["failed"], 0);
  EXPECT_EQ(j["total_output_tokens"], 4 * 10);
  EXPECT_GT(j["total_input_tokens"].get<int>(), 0);
  expect_sane_latencies(j);
}

TEST_F(BenchServe, PoissonArrivalsAndGoodput) {
  const auto j = bench("--input-len 8 --output-len 6 --num-prompts 5 --request-rate 20 --vocab-size 512 "
                       "--goodput e2el:600000 --percentiles 50,90");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["completed"], 5);
  EXPECT_EQ(j["request_rate"], 20.0);
  EXPECT_EQ(j["good_requests"], 5);  // ten minutes is met by every request
  EXPECT_TRUE(j.contains("p90_ttft_ms"));
  EXPECT_FALSE(j.contains("p99_ttft_ms"));
}

}  // namespace
