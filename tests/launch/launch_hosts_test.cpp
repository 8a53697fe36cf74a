// `moengine launch` of expert-parallel groups over two hosts that the test makes (network
// namespaces with an sshd each, ssh_hosts.h): one prefill group and two decode groups of 2
// ranks, each group's ranks on both hosts, started over ssh by mpirun, behind the proxy.
// Every answer equals a unified instance's token for token; a rank killed while 16 streams
// decode costs no client an error and its group comes back; a prefill rank killed while
// prompts prefill costs none either. Skips where hosts cannot be made (not root).
#include <gtest/gtest.h>

#include <dirent.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>

#include "disagg/pd_answers.h"
#include "disagg/pd_processes.h"
#include "launch/launch_process.h"
#include "launch/ssh_hosts.h"

namespace moe {
namespace {

using nlohmann::json;
using testing::Answer;
using testing::LaunchProcess;
using namespace std::chrono_literals;

std::string dir() { return testing::test_dir("launch_hosts"); }
std::string chat_template() { return std::string(MOE_SERVER_TEST_DIR) + "/synthetic_chat_template.jinja"; }

std::string write_topology(const testing::SshHosts& hosts, const std::string& name) {
  const std::string path = dir() + "/" + name + ".yaml";
  std::ofstream(path) << "model: {path: " << testing::tiny_model(dir()) << ", name: tiny}\n"
                      << hosts.hosts_yaml(testing::moengine_bin(), dir()) << "defaults:\n"
                      << "  threads: 1\n"
                      << "  kv_transport: ucx\n"
                      << "  args: [--kv-cache-memory, 0.05, --chat-template, " << chat_template() << "]\n"
                      << "  restart: on-failure\n"
                      << "instances:\n"
                      << "  - {name: prefill, role: prefill, ep: 2, hosts: [a, b]}\n"
                      << "  - {name: decode, role: decode, ep: 2, hosts: [a, b], count: 2}\n"
                      << "proxy: {port: 0, policy: round_robin, args: [--health-interval-ms, 200, --max-attempts, 8, --access-log, " << dir() << "/" << name << "/access.log]}\n"
                      << "timeouts: {ready_s: 150, stop_s: 5}\n";
  return path;
}

// The `moengine serve` processes of an instance's ranks (launch's table names mpirun).
std::vector<pid_t> rank_pids(const std::string& engine_id) {
  std::vector<pid_t> pids;
  DIR* proc = ::opendir("/proc");
  for (dirent* e = proc ? ::readdir(proc) : nullptr; e; e = ::readdir(proc)) {
    const pid_t pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    std::ifstream in("/proc/" + std::string(e->d_name) + "/cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find(" serve --model ") != std::string::npos && cmd.find("--engine-id " + engine_id + " ") != std::string::npos &&
        !cmd.starts_with("mpirun")) {
      pids.push_back(pid);
    }
  }
  if (proc) ::closedir(proc);
  return pids;
}

double metric_at(const std::string& url, const std::string& name) { return testing::metric(testing::get(url, "/metrics").body, name); }

json bodies(int n, int prompt_words, int max_tokens, int salt) {
  json all = json::array();
  for (int i = 0; i < n; ++i) {
    json b{{"model", "tiny"}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
    if (i % 2) b["messages"] = {{{"role", "user"}, {"content", testing::words(prompt_words + 7 * i, i + salt)}}};
    else b["prompt"] = testing::words(prompt_words + 7 * i, i + salt);
    if ((i / 2) % 2) {
      b["stream"] = true;
      b["stream_options"] = {{"include_usage", true}};
    }
    all.push_back(b);
  }
  return all;
}

class LaunchHosts : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { hosts_ = new testing::SshHosts(dir(), 2); }
  static void TearDownTestSuite() {
    delete hosts_;
    hosts_ = nullptr;
  }
  void SetUp() override {
    if (!hosts_->error().empty()) GTEST_SKIP() << "cannot make hosts here, so launch over ssh is not covered: " << hosts_->error();
    unified_ = testing::start_ready(dir(), "serve", "unified",
                                    {"--model", testing::tiny_model(dir()), "--port", "0", "--served-model-name", "tiny",
                                     "--kv-cache-memory", "0.05", "--threads", "1", "--chat-template", chat_template()});
  }

  std::unique_ptr<LaunchProcess> launch(const std::string& name) {
    const std::string topology = write_topology(*hosts_, name);
    std::filesystem::remove_all(dir() + "/" + name);
    std::filesystem::create_directories(dir() + "/" + name);
    const auto t0 = std::chrono::steady_clock::now();
    auto l = std::make_unique<LaunchProcess>(topology, dir() + "/" + name);
    url_ = l->ready_url(180s);
    if (!url_.empty()) {
      std::printf("launch over two hosts ready in %.1f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return l;
  }

  // Every body through the proxy at once, `during` run once they are sent; each answer
  // must be the unified instance's.
  void run_and_compare(const json& all, const std::function<void()>& during) {
    const auto path = [](const json& b) { return b.contains("messages") ? "/v1/chat/completions" : "/v1/completions"; };
    std::vector<Answer> want;
    for (const json& b : all) want.push_back(testing::ask(unified_->url(), path(b), b));
    std::vector<std::future<Answer>> got;
    for (const json& b : all) got.push_back(std::async(std::launch::async, [&, b] { return testing::ask(url_, path(b), b); }));
    during();
    for (size_t i = 0; i < all.size(); ++i) testing::expect_same_answer(want[i], got[i].get(), "request " + std::to_string(i));
  }

  std::string rank_url(const LaunchProcess& l, const std::string& name) const { return l.endpoints().at(name).url; }

  static testing::SshHosts* hosts_;
  std::unique_ptr<testing::ServeProcess> unified_;
  std::string url_;
};

testing::SshHosts* LaunchHosts::hosts_ = nullptr;

TEST_F(LaunchHosts, GroupsOverTwoHostsAnswerAsUnified) {
  auto l = launch("answers");
  ASSERT_FALSE(url_.empty()) << l->out() << l->err();
  ASSERT_EQ(l->endpoints().size(), 7u) << l->out();
  for (const char* group : {"prefill-0", "decode-0", "decode-1"}) {
    EXPECT_EQ(l->endpoints().at(std::string(group) + "-rank0").host, "a") << l->out();
    EXPECT_EQ(l->endpoints().at(std::string(group) + "-rank1").host, "b") << l->out();
    EXPECT_NE(rank_url(*l, std::string(group) + "-rank1").find(hosts_->address(1)), std::string::npos) << l->out();
  }
  run_and_compare(bodies(16, 40, 16, 1), [] {});
  // The proxy knows the groups: each rank's entry names its group.
  const json health = testing::get(url_, "/health").json();
  int in_groups = 0;
  for (const json& i : health["instances"]) in_groups += i.value("group", "").empty() ? 0 : 1;
  EXPECT_EQ(in_groups, 6) << health.dump(2);
  for (const char* r : {"decode-0-rank0", "decode-0-rank1", "decode-1-rank0", "decode-1-rank1"}) {
    EXPECT_GT(metric_at(rank_url(*l, r), "generation_tokens_total"), 0) << r << " decoded nothing";
  }
  l->signal(SIGTERM);
  EXPECT_EQ(l->wait_exit(60s), 0) << l->err();
  EXPECT_TRUE(rank_pids("decode-0").empty() && rank_pids("prefill-0").empty()) << "ranks left running";
}

TEST_F(LaunchHosts, ALostRankStopsItsGroupWhichComesBackWithNoClientError) {
  auto l = launch("kill");
  ASSERT_FALSE(url_.empty()) << l->out() << l->err();
  const std::vector<pid_t> decode0 = rank_pids("decode-0");
  ASSERT_EQ(decode0.size(), 2u);

  // A decode rank killed while 16 streams decode: they go on at decode-1.
  std::chrono::steady_clock::time_point killed;
  run_and_compare(bodies(16, 30, 160, 2), [&] {
    const std::string d0 = rank_url(*l, "decode-0-rank0");
    for (int i = 0; i < 3000 && metric_at(d0, "generation_tokens_total") < 40; ++i) std::this_thread::sleep_for(5ms);
    ::kill(decode0[1], SIGKILL);
    killed = std::chrono::steady_clock::now();
  });
  std::printf("16 streams answered %.2f s after the decode rank was killed\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count());
  ASSERT_TRUE(l->wait_for("decode-0 ready again in", 90s, true)) << l->err();
  std::printf("decode-0 back %.2f s after the kill\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count());
  const std::string err = l->err();
  EXPECT_NE(err.find("decode-0 (pid " + std::to_string(l->endpoints().at("decode-0-rank0").pid) + ") exited"), std::string::npos) << err;
  EXPECT_NE(err.find("noticed that process rank "), std::string::npos) << "the lost rank is not named:\n" << err;
  for (const char* r : {"decode-1-rank0", "decode-1-rank1", "prefill-0-rank0", "prefill-0-rank1"}) {
    const std::string u = rank_url(*l, r);
    double used = -1;
    for (int i = 0; i < 100 && (used = metric_at(u, "num_kv_blocks_used") + metric_at(u, "kv_leases_active")) != 0; ++i) {
      std::this_thread::sleep_for(50ms);
    }
    EXPECT_EQ(used, 0) << r << " still holds KV blocks or leases";
  }
  // Back on the same ports, and routed to again.
  const std::string d0 = rank_url(*l, "decode-0-rank0"), d1 = rank_url(*l, "decode-0-rank1");
  // Rounds of requests until one reaches it, once its probes answer (bounded).
  double routed = 0;
  for (int round = 0; round < 60 && routed == 0; ++round) {
    run_and_compare(bodies(4, 20, 4, 3 + round), [] {});
    routed = metric_at(d0, "generation_tokens_total") + metric_at(d1, "generation_tokens_total");
    if (routed == 0) std::this_thread::sleep_for(500ms);
  }
  EXPECT_GT(routed, 0) << "decode-0 is not routed to:\n" << testing::get(url_, "/health").body;

  // A prefill rank killed while 16 prompts prefill: retried once the group is back.
  const std::vector<pid_t> prefill0 = rank_pids("prefill-0");
  ASSERT_EQ(prefill0.size(), 2u);
  run_and_compare(bodies(16, 600, 4, 4), [&] {
    const std::string p0 = rank_url(*l, "prefill-0-rank0");
    for (int i = 0; i < 3000 && metric_at(p0, "prompt_tokens_total") < 1; ++i) std::this_thread::sleep_for(2ms);
    ::kill(prefill0[0], SIGKILL);
  });
  EXPECT_TRUE(l->wait_for("prefill-0 ready again in", 90s, true)) << l->err();
  l->signal(SIGTERM);
  EXPECT_EQ(l->wait_exit(60s), 0) << l->err();
}

}  // namespace
}  // namespace moe
