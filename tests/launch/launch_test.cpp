// `moengine launch` end to end on a 1P1D topology of a generated tiny model: it gets ready,
// serves through the proxy URL it prints, stops everything on SIGTERM, restarts a decode
// instance killed with `restart: on-failure` on its port, and with `restart: never` stops
// everything and exits 1 naming it. Plus --dry-run and a bad file from the command line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "launch/launch_process.h"
#include "support/http_calls.h"
#include "support/run_cli.h"

namespace moe {
namespace {

using namespace std::chrono_literals;
using testing::LaunchProcess;
using testing::process_alive;

// A fresh folder for one test, with a topology file in it; the model cache is shared.
std::string write_topology(const std::string& test, const std::string& decode_restart) {
  const std::string dir = testing::test_dir("launch/" + test);
  std::filesystem::remove_all(dir + "/logs");
  const std::string path = dir + "/topology.yaml";
  std::ofstream(path) << "model:\n"
                      << "  generate: {arch: deepseek2, preset: tiny, type: q8_0, seed: 1, cache_dir: " << testing::test_dir("launch/models")
                      << "}\n"
                      << "  name: tiny\n"
                      << "defaults:\n"
                      << "  threads: 1\n"
                      << "  kv_transport: ucx\n"
                      << "  args: [--kv-cache-memory, 0.05]\n"
                      << "instances:\n"
                      << "  - {name: prefill, role: prefill}\n"
                      << "  - {name: decode, role: decode, restart: " << decode_restart << "}\n"
                      << "proxy: {port: 0}\n"
                      << "timeouts: {ready_s: 60, stop_s: 5}\n";
  return path;
}

// A completion through the proxy: 200 with some text.
void expect_completion(const std::string& url) {
  const testing::Reply r = testing::post_json(url, "/v1/completions",
                                              {{"model", "tiny"}, {"prompt", "The experts"}, {"max_tokens", 4}, {"ignore_eos", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_FALSE(r.json()["choices"][0]["text"].get<std::string>().empty()) << r.body;
}

std::string dir_of(const std::string& path) { return std::filesystem::path(path).parent_path().string(); }

TEST(Launch, RestartsOnFailureOnTheSamePortThenStopsOnSigterm) {
  const std::string topology = write_topology("restart", "on-failure");
  LaunchProcess launch(topology, dir_of(topology));
  const std::string url = launch.ready_url(90s);
  ASSERT_FALSE(url.empty()) << launch.out() << launch.err();
  ASSERT_EQ(launch.endpoints().size(), 3u) << launch.out();
  const testing::Endpoint decode = launch.endpoints().at("decode-0");
  EXPECT_EQ(decode.role, "decode");
  EXPECT_EQ(launch.endpoints().at("proxy").url, url);
  expect_completion(url);

  ::kill(decode.pid, SIGKILL);
  ASSERT_TRUE(launch.wait_for("decode-0 ready again in", 60s, true)) << launch.err();
  const std::string err = launch.err();
  EXPECT_NE(err.find("decode-0 (pid " + std::to_string(decode.pid) + ") was killed by signal 9 (SIGKILL); restarting it on port"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("ready again in"), std::string::npos);
  EXPECT_NE(err.find("on " + decode.url + " (pid"), std::string::npos) << "not back on the same port:\n" << err;
  EXPECT_FALSE(process_alive(decode.pid)) << "the dead instance was not reaped";
  expect_completion(url);

  launch.signal(SIGTERM);
  EXPECT_EQ(launch.wait_exit(30s), 0) << launch.err();
  for (const auto& [name, e] : launch.endpoints()) EXPECT_FALSE(process_alive(e.pid)) << name << " still runs";
  EXPECT_NE(launch.err().find("SIGTERM received, stopping"), std::string::npos) << launch.err();
}

TEST(Launch, AnInstanceThatMayNotRestartStopsEverything) {
  const std::string topology = write_topology("never", "never");
  LaunchProcess launch(topology, dir_of(topology));
  ASSERT_FALSE(launch.ready_url(90s).empty()) << launch.out() << launch.err();
  const testing::Endpoint decode = launch.endpoints().at("decode-0");

  ::kill(decode.pid, SIGKILL);
  EXPECT_EQ(launch.wait_exit(30s), 1) << launch.err();
  const std::string err = launch.err();
  EXPECT_NE(err.find("error: decode-0 (pid " + std::to_string(decode.pid) +
                     ") was killed by signal 9 (SIGKILL) and its restart policy is never; everything was stopped"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("Last lines of " + decode.log), std::string::npos) << err;
  for (const auto& [name, e] : launch.endpoints()) EXPECT_FALSE(process_alive(e.pid)) << name << " still runs";
}

TEST(Launch, DryRunPrintsTheCommandLines) {
  const std::string topology = write_topology("dry-run", "never");
  const testing::CliResult r = testing::run_moengine("launch " + topology + " --dry-run");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find(" serve --model "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--role prefill --host 127.0.0.1 --port 0 --threads 1 --engine-id prefill-0 --kv-transport ucx "
                       "--kv-events-endpoint 'tcp://127.0.0.1:*' --kv-cache-memory 0.05"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("#       url: <URL of prefill-0>\n#       role: prefill\n#       weight: 1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" proxy --host 127.0.0.1 --port 0 --tokenizer "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/proxy-instances.yaml would hold:\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/proxy-instances.yaml\n"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir_of(topology) + "/logs"));
}

TEST(Launch, BadFileIsAnErrorNamingTheLine) {
  const std::string path = testing::test_dir("launch/bad") + "/bad.yaml";
  std::ofstream(path) << "model: m.gguf\ninstances:\n  - {name: u, role: both, thread: 1}\n";
  const testing::CliResult r = testing::run_moengine("launch " + path);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("error: " + path + ":3:27: instances[0].thread: unknown key"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace moe
