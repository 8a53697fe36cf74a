// `moengine serve` end to end: a tiny generated model served on a free port (--port 0; the
// ready line names the port), driven by the official openai npm client
// (tests/server/js/openai_client_test.mjs, installed by scripts/setup-npm.sh), plus clean
// shutdown on SIGTERM mid-stream and the errors a user sees for bad flags.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/run_cli.h"
#include "support/serve_process.h"

namespace moe {
namespace {

using testing::ServeProcess;

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string bin() {
  const char* b = std::getenv("MOENGINE_BIN");
  return b ? b : "moengine";
}

std::string tmp() {
  const char* t = std::getenv("MOENGINE_TEST_TMP");
  const std::filesystem::path dir = std::filesystem::path(t ? t : "/tmp") / "serve";
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Empty when the openai package is installed, else how to install it.
std::string client_missing() {
  const std::string pkg = std::string(MOE_SERVER_JS_DIR) + "/node_modules/openai/package.json";
  if (!std::filesystem::exists(pkg)) return pkg + " is missing: run scripts/setup-npm.sh";
  if (std::system("node --version > /dev/null 2>&1") != 0) return "node is not on PATH: run scripts/setup.sh";
  return "";
}

class Serve : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = tmp() + "/serve-tiny.gguf";
    const std::string cmd = bin() + " gen-model --arch deepseek2 --preset tiny --type q8_0 --out " + model_ + " > " + tmp() + "/gen.log 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(tmp() + "/gen.log");
  }

  static std::vector<std::string> base_args(std::vector<std::string> extra) {
    std::vector<std::string> a{"--model", model_, "--port", "0", "--served-model-name", "tiny", "--kv-cache-memory", "0.05",
                               "--chat-template", std::string(MOE_SERVER_TEST_DIR) + "/synthetic_chat_template.jinja"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

  // Runs one scenario of the openai client script; its output on failure.
  static void run_client(ServeProcess& server, const std::string& scenario, const std::string& key = "") {
    const std::string missing = client_missing();
    ASSERT_TRUE(missing.empty()) << missing;
    const std::string url = server.url();
    ASSERT_FALSE(url.empty()) << "the server never said it was ready:\n" << server.log();
    const std::string log = tmp() + "/client-" + scenario + ".log";
    const std::string cmd = "cd '" + std::string(MOE_SERVER_JS_DIR) + "' && node openai_client_test.mjs " + scenario + " " + url + " tiny " + key +
                            " > '" + log + "' 2>&1";
    const int rc = std::system(cmd.c_str());
    EXPECT_EQ(rc, 0) << slurp(log) << "\nserver log:\n" << server.log();
    EXPECT_EQ(server.stop(), 0) << "the server did not shut down cleanly:\n" << server.log();
  }

  static std::string model_;
};
std::string Serve::model_;

TEST_F(Serve, OpenAiClientChatCompletionsStreamingErrorsAndDisconnects) {
  ServeProcess server(base_args({"--max-model-len", "1024", "--max-body-bytes", "65536"}), tmp() + "/main.log");
  EXPECT_EQ(server.ready_line().rfind("serving tiny on http://127.0.0.1:", 0), 0u) << server.log();
  run_client(server, "main");
}

TEST_F(Serve, QueueFullIs429WithRetryAfter) {
  ServeProcess server(base_args({"--max-num-seqs", "1", "--max-waiting", "1"}), tmp() + "/queue.log");
  run_client(server, "queue");
}

TEST_F(Serve, ApiKeyIsRequiredOnV1Routes) {
  ServeProcess server(base_args({"--api-key", "s3cret"}), tmp() + "/auth.log");
  run_client(server, "auth", "s3cret");
}

TEST_F(Serve, SigtermMidStreamShutsDownCleanly) {
  ServeProcess server(base_args({}), tmp() + "/sigterm.log");
  const int port = server.port();
  ASSERT_GT(port, 0) << server.log();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string body = R"({"model": "tiny", "prompt": "go", "max_tokens": 4000, "ignore_eos": true, "stream": true})";
  const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), ssize_t(req.size()));
  std::string got;
  std::array<char, 4096> buf;
  while (got.find("data: ") == std::string::npos) {
    pollfd p{fd, POLLIN, 0};
    ASSERT_GT(::poll(&p, 1, 10000), 0) << "no stream data:\n" << got;
    const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    ASSERT_GT(n, 0);
    got.append(buf.data(), size_t(n));
  }
  const auto t0 = Clock::now();
  EXPECT_EQ(server.stop(), 0) << server.log();
  EXPECT_LT(Clock::now() - t0, 10s);
  EXPECT_NE(server.log().find("serve: SIGTERM received, shutting down"), std::string::npos) << server.log();
  // The stream's connection was closed rather than left hanging.
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    ASSERT_GT(::poll(&p, 1, 5000), 0);
    if (::recv(fd, buf.data(), buf.size(), 0) <= 0) break;
  }
  ::close(fd);
}

using testing::CliResult;

CliResult run_cli(const std::string& args) { return testing::run_command(bin() + " " + args + " 2>&1"); }

TEST_F(Serve, BadFlagsAreClearErrors) {
  CliResult r = run_cli("serve --model " + model_ + " --port 70000");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("error: --port must be a port in [0, 65535], got '70000'"), std::string::npos) << r.out;
  // Lists of addresses are for the ranks of a group, one per rank.
  r = run_cli("serve --model " + model_ + " --port 8100,8101");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("error: --port '8100,8101': a list of values is for the ranks of an expert-parallel group (--ep N)"),
            std::string::npos)
      << r.out;
  r = run_cli("serve --model " + model_ + " --max-num-seqs 8 --max-num-batched-tokens 4");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("error: --max-num-batched-tokens (4) must be at least --max-num-seqs (8)"), std::string::npos) << r.out;
  r = run_cli("serve --model " + model_ + " --chat-template /nonexistent/template.jinja");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("error: --chat-template: cannot open '/nonexistent/template.jinja' (and it is not template text)"), std::string::npos)
      << r.out;
  r = run_cli("serve --model " + model_ + " --max-model-len 5000");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("error: --max-model-len 5000 is more than the model's context length (4096 tokens)"), std::string::npos) << r.out;
  r = run_cli("serve --model " + model_ + " --kv-cache-dtype int4");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("error: --kv-cache-dtype: 'int4' is not one of auto, f32, f16, bf16, fp8_e4m3, q8_0"), std::string::npos) << r.out;
  r = run_cli("serve --model " + model_ + " --max-model-len 1024 --kv-cache-memory 0.0005 --kv-cache-dtype f32");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("error: --max-model-len 1024 is more than the KV cache holds (464 tokens in 0.0005 GiB); raise --kv-cache-memory "
                       "or lower --max-model-len"),
            std::string::npos)
      << r.out;
  r = run_cli("serve --model " + model_ + " --scheduling-policy lifo");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--scheduling-policy"), std::string::npos) << r.out;
  r = run_cli("serve --help");
  EXPECT_EQ(r.status, 0);
  for (const char* flag : {"--model", "--host", "--port", "--api-key", "--served-model-name", "--max-model-len", "--max-num-batched-tokens",
                           "--max-num-seqs", "--kv-cache-memory", "--block-size", "--max-waiting", "--scheduling-policy", "--threads",
                           "--max-body-bytes", "--chat-template", "Examples:"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }

  ServeProcess first(base_args({}), tmp() + "/first.log");
  const int port = first.port();
  ASSERT_GT(port, 0) << first.log();
  r = run_cli("serve --model " + model_ + " --kv-cache-memory 0.05 --port " + std::to_string(port));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("error: cannot listen on 127.0.0.1:" + std::to_string(port) + ": Address already in use"), std::string::npos) << r.out;
  EXPECT_EQ(first.stop(), 0) << first.log();
}

}  // namespace
}  // namespace moe
