// Nothing in a prefill/decode deployment assumes one host: the prefill instance runs in a
// network namespace of its own, joined to the decode instance's by a veth pair, so the KV
// crosses a real link between two addresses (UCX restricted to TCP, as between hosts).
// The answers through the proxy still equal a unified instance's. Needs root (or
// CAP_NET_ADMIN) for `ip netns`; skips with a message otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "disagg/pd_answers.h"
#include "support/run_cli.h"
#include "support/serve_process.h"

namespace moe {
namespace {

using nlohmann::json;
using testing::ServeProcess;

std::string dir() { return testing::test_dir("pd_netns"); }

// A namespace and a veth pair named after this process, removed when the test ends.
class TwoHosts {
 public:
  TwoHosts() {
    const int id = int(::getpid() % 200);
    ns_ = "moe-pd-" + std::to_string(::getpid());
    root_if_ = "mpd" + std::to_string(::getpid() % 100000) + "a";
    ns_if_ = "mpd" + std::to_string(::getpid() % 100000) + "b";
    prefill_ip_ = "10.213." + std::to_string(id) + ".1";
    decode_ip_ = "10.213." + std::to_string(id) + ".2";
    const std::vector<std::string> steps{
        "ip netns add " + ns_,
        "ip link add " + root_if_ + " type veth peer name " + ns_if_,
        "ip link set " + ns_if_ + " netns " + ns_,
        "ip addr add " + decode_ip_ + "/24 dev " + root_if_,
        "ip link set " + root_if_ + " up",
        "ip netns exec " + ns_ + " ip addr add " + prefill_ip_ + "/24 dev " + ns_if_,
        "ip netns exec " + ns_ + " ip link set " + ns_if_ + " up",
        "ip netns exec " + ns_ + " ip link set lo up"};
    for (const std::string& s : steps) {
      const testing::CliResult r = testing::run_command(s + " 2>&1");
      if (r.status != 0) {
        error_ = "'" + s + "' failed: " + r.out;
        return;
      }
    }
  }
  ~TwoHosts() {
    (void)testing::run_command("ip link del " + root_if_ + " 2>/dev/null");
    (void)testing::run_command("ip netns del " + ns_ + " 2>/dev/null");
  }
  const std::string& error() const { return error_; }
  const std::string& ns() const { return ns_; }
  const std::string& prefill_ip() const { return prefill_ip_; }
  const std::string& decode_ip() const { return decode_ip_; }

 private:
  std::string ns_, root_if_, ns_if_, prefill_ip_, decode_ip_, error_;
};

std::unique_ptr<ServeProcess> start(const std::string& command, const std::string& name, std::vector<std::string> args,
                                    std::vector<std::string> wrapper = {}) {
  auto p = std::make_unique<ServeProcess>(args, dir() + "/" + name + ".log", command, wrapper);
  if (p->url().empty()) throw std::runtime_error(name + " never became ready:\n" + p->log());
  return p;
}

class PdTwoHosts : public ::testing::TestWithParam<std::string> {};

TEST_P(PdTwoHosts, KvCrossesAVethLinkAndAnswersStayTheSame) {
  if (::geteuid() != 0) GTEST_SKIP() << "network namespaces need root: run the suite as root to cover two hosts";
  TwoHosts hosts;
  if (!hosts.error().empty()) GTEST_SKIP() << "cannot make network namespaces here: " << hosts.error();
  const std::string kv = GetParam();
  const std::string model = dir() + "/tiny.gguf";
  if (!std::filesystem::exists(model)) {
    ASSERT_EQ(testing::run_moengine("gen-model --arch deepseek2 --preset tiny --type q8_0 --out " + model).status, 0);
  }
  const std::vector<std::string> common{"--model", model, "--port", "0", "--served-model-name", "tiny", "--kv-cache-memory", "0.05",
                                        "--kv-transport", kv};
  // UCX would find shared memory between the two namespaces (one kernel); between hosts it
  // has only the network.
  const std::vector<std::string> tcp_only{"env", "UCX_TLS=tcp"};
  std::vector<std::string> in_ns{"ip", "netns", "exec", hosts.ns()};
  in_ns.insert(in_ns.end(), tcp_only.begin(), tcp_only.end());
  std::vector<std::string> p_args = common, d_args = common, u_args(common.begin(), common.end() - 2);
  p_args.insert(p_args.end(), {"--role", "prefill", "--host", hosts.prefill_ip()});
  d_args.insert(d_args.end(), {"--role", "decode", "--host", hosts.decode_ip()});
  auto unified = start("serve", "unified-" + kv, u_args);
  auto prefill = start("serve", "prefill-" + kv, p_args, in_ns);
  auto decode = start("serve", "decode-" + kv, d_args, tcp_only);
  auto proxy = start("proxy", "proxy-" + kv, {"--port", "0", "--prefill", prefill->url(), "--decode", decode->url()});
  ASSERT_NE(prefill->url().find(hosts.prefill_ip()), std::string::npos) << prefill->url();

  for (bool stream : {false, true}) {
    std::string words;
    for (int i = 0; i < 300; ++i) words += "w" + std::to_string(i % 89) + " ";
    json body{{"model", "tiny"}, {"prompt", words}, {"max_tokens", 12}, {"temperature", 0}, {"stream", stream}};
    if (stream) body["stream_options"] = {{"include_usage", true}};
    const testing::Answer want = testing::ask(unified->url(), "/v1/completions", body);
    ASSERT_EQ(want.status, 200) << want.error;
    testing::expect_same_answer(want, testing::ask(proxy->url(), "/v1/completions", body), body.dump());
  }
  const std::string dm = testing::get(decode->url(), "/metrics").body;
  EXPECT_EQ(testing::metric(dm, "kv_remote_loads_total", "result=\"loaded\""), 2) << decode->log();
  EXPECT_GT(testing::metric(dm, "kv_transfer_bytes_total"), 0);
}

INSTANTIATE_TEST_SUITE_P(Transports, PdTwoHosts, ::testing::Values("tcp", "ucx"));

}  // namespace
}  // namespace moe
