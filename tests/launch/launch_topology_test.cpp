// Topology files: every field read, defaults applied, replicas expanded, the shipped
// configs valid, and each kind of bad input refused with its file, line and field.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "launch/topology.h"

namespace moe::launch {
namespace {

// The message of the error parsing `yaml` gives ("" if it parses).
std::string error_of(const std::string& yaml) {
  try {
    parse_topology(yaml, "t.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const char* const kMinimal = R"(model: m.gguf
instances:
  - {name: p, role: prefill}
  - {name: d, role: decode}
)";

TEST(LaunchTopology, ReadsEveryField) {
  const Topology t = parse_topology(R"(model:
  generate: {arch: qwen3moe, preset: mid, type: q4_K, seed: 7, cache_dir: /tmp/c}
  name: served
defaults:
  host: 127.0.0.2
  threads: 3
  kv_transport: tcp
  speculative_config: '{"method": "ngram", "num_speculative_tokens": 2}'
  args: [--kv-cache-memory, 0.5]
  restart: on-failure
  max_restarts: 5
instances:
  - name: pre
    role: prefill
    count: 1
    host: 127.0.0.3
    port: 9100
    threads: 2
    kv_transport: ucx
    weight: 2.5
    args: [--max-num-seqs, 8]
    restart: never
    max_restarts: 1
  - {name: dec, role: decode}
  - {name: uni, role: both}
proxy:
  host: 0.0.0.0
  port: 9000
  policy: cost
  api_key: k1
  admin_key: k2
  args: [--timeout-s, 30]
timeouts: {ready_s: 5.5, stop_s: 2}
)",
                                    "t.yaml");
  EXPECT_EQ(t.file, "t.yaml");
  ASSERT_TRUE(t.model.generate);
  EXPECT_TRUE(t.model.path.empty());
  EXPECT_EQ(t.model.generate->arch, "qwen3moe");
  EXPECT_EQ(t.model.generate->preset, "mid");
  EXPECT_EQ(t.model.generate->type, "q4_K");
  EXPECT_EQ(t.model.generate->seed, 7u);
  EXPECT_EQ(t.model.generate->cache_dir, "/tmp/c");
  EXPECT_EQ(t.model.served_name, "served");
  EXPECT_EQ(t.model.where, "t.yaml:2");

  ASSERT_EQ(t.instances.size(), 3u);
  const InstanceSpec& p = t.instances[0];
  EXPECT_EQ(p.name, "pre-0");
  EXPECT_EQ(p.entry, "pre");
  EXPECT_EQ(p.role, InstanceRole::kPrefill);
  ASSERT_EQ(p.ranks.size(), 1u);
  EXPECT_EQ(p.ranks[0].name, "pre-0");
  EXPECT_EQ(p.ranks[0].address, "127.0.0.3");
  EXPECT_EQ(p.ranks[0].host, -1);
  EXPECT_EQ(p.ranks[0].port, 9100);
  EXPECT_FALSE(p.group());
  EXPECT_EQ(p.threads, 2);
  EXPECT_EQ(p.kv_transport, "ucx");
  EXPECT_DOUBLE_EQ(p.weight, 2.5);
  EXPECT_EQ(p.args, (std::vector<std::string>{"--kv-cache-memory", "0.5", "--max-num-seqs", "8"}));
  EXPECT_EQ(p.restart, RestartPolicy::kNever);
  EXPECT_EQ(p.max_restarts, 1);

  // The defaults fill in what an entry does not say.
  const InstanceSpec& d = t.instances[1];
  EXPECT_EQ(d.name, "dec-0");
  EXPECT_EQ(d.role, InstanceRole::kDecode);
  EXPECT_EQ(d.ranks.at(0).address, "127.0.0.2");
  EXPECT_EQ(d.ranks.at(0).port, 0);
  EXPECT_EQ(d.threads, 3);
  EXPECT_EQ(d.kv_transport, "tcp");
  EXPECT_DOUBLE_EQ(d.weight, 1.0);
  EXPECT_EQ(d.args, (std::vector<std::string>{"--kv-cache-memory", "0.5"}));
  EXPECT_EQ(d.restart, RestartPolicy::kOnFailure);
  EXPECT_EQ(d.max_restarts, 5);
  // Only the instances that decode take the default speculative config.
  EXPECT_EQ(d.speculative_config, R"({"method": "ngram", "num_speculative_tokens": 2})");
  EXPECT_EQ(p.speculative_config, "");
  EXPECT_EQ(t.instances[2].speculative_config, d.speculative_config);
  EXPECT_EQ(t.instances[2].role, InstanceRole::kBoth);
  EXPECT_EQ(t.instances[2].kv_transport, "tcp");

  EXPECT_EQ(t.proxy.host, "0.0.0.0");
  EXPECT_EQ(t.proxy.port, 9000);
  EXPECT_EQ(t.proxy.policy, "cost");
  EXPECT_EQ(t.proxy.api_key, "k1");
  EXPECT_EQ(t.proxy.admin_key, "k2");
  EXPECT_EQ(t.proxy.args, (std::vector<std::string>{"--timeout-s", "30"}));
  EXPECT_DOUBLE_EQ(t.ready_timeout_s, 5.5);
  EXPECT_DOUBLE_EQ(t.stop_timeout_s, 2);
}

TEST(LaunchTopology, Defaults) {
  const Topology t = parse_topology(std::string(kMinimal) + "  - {name: u, role: both}\n", "t.yaml");
  EXPECT_EQ(t.model.path, "m.gguf");
  EXPECT_FALSE(t.model.generate);
  EXPECT_TRUE(t.model.served_name.empty());
  ASSERT_EQ(t.instances.size(), 3u);
  for (const InstanceSpec& s : t.instances) {
    EXPECT_EQ(s.ranks.at(0).address, "127.0.0.1");
    EXPECT_EQ(s.ranks.at(0).port, 0);
    EXPECT_EQ(s.threads, 0);
    EXPECT_DOUBLE_EQ(s.weight, 1.0);
    EXPECT_TRUE(s.args.empty());
    EXPECT_EQ(s.restart, RestartPolicy::kNever);
    EXPECT_EQ(s.max_restarts, 3);
  }
  for (const InstanceSpec& s : t.instances) EXPECT_EQ(s.kv_transport, "ucx");
  EXPECT_EQ(t.proxy.host, "127.0.0.1");
  EXPECT_EQ(t.proxy.port, 8000);
  EXPECT_TRUE(t.proxy.policy.empty() && t.proxy.api_key.empty() && t.proxy.admin_key.empty() && t.proxy.args.empty());
  EXPECT_DOUBLE_EQ(t.ready_timeout_s, 120);
  EXPECT_DOUBLE_EQ(t.stop_timeout_s, 10);

  const Topology g = parse_topology("model: {generate: {}}\ninstances: [{name: u, role: both}]\n", "t.yaml");
  ASSERT_TRUE(g.model.generate);
  EXPECT_EQ(g.model.generate->arch, "deepseek2");
  EXPECT_EQ(g.model.generate->preset, "tiny");
  EXPECT_EQ(g.model.generate->type, "f32");
  EXPECT_EQ(g.model.generate->seed, 42u);
  EXPECT_TRUE(g.model.generate->cache_dir.empty());
}

TEST(LaunchTopology, ExpandsReplicas) {
  const Topology t = parse_topology(R"(model: m.gguf
instances:
  - {name: p, role: prefill, count: 2}
  - {name: d, role: decode, count: 3, port: 9200}
proxy: {port: 0}
)",
                                    "t.yaml");
  ASSERT_EQ(t.instances.size(), 5u);
  EXPECT_EQ(t.instances[0].name, "p-0");
  EXPECT_EQ(t.instances[1].name, "p-1");
  EXPECT_EQ(t.instances[0].ranks.at(0).port, 0);
  EXPECT_EQ(t.instances[1].ranks.at(0).port, 0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(t.instances[2 + i].name, "d-" + std::to_string(i));
    EXPECT_EQ(t.instances[2 + i].entry, "d");
    EXPECT_EQ(t.instances[2 + i].ranks.at(0).port, 9200 + i);
    EXPECT_EQ(t.instances[2 + i].role, InstanceRole::kDecode);
  }
}

TEST(LaunchTopology, ShippedConfigsAreValid) {
  const Topology a = load_topology(std::string(MOE_CONFIGS_DIR) + "/1p1d.yaml");
  ASSERT_EQ(a.instances.size(), 2u);
  EXPECT_EQ(a.instances[0].name, "prefill-0");
  EXPECT_EQ(a.instances[1].name, "decode-0");
  EXPECT_EQ(a.instances[1].restart, RestartPolicy::kOnFailure);
  ASSERT_TRUE(a.model.generate);
  EXPECT_EQ(a.model.generate->type, "q8_0");
  EXPECT_EQ(a.model.served_name, "tiny");
  EXPECT_EQ(load_topology(std::string(MOE_CONFIGS_DIR) + "/2p1d.yaml").instances.size(), 3u);
  const Topology c = load_topology(std::string(MOE_CONFIGS_DIR) + "/2p2d.yaml");
  ASSERT_EQ(c.instances.size(), 4u);
  EXPECT_EQ(c.instances[1].ranks.at(0).port, 18311);
  EXPECT_EQ(c.instances[3].ranks.at(0).port, 18321);
  for (const InstanceSpec& s : c.instances) {
    EXPECT_EQ(s.threads, 1);
    EXPECT_EQ(s.kv_transport, "ucx");
  }
}

TEST(LaunchTopology, ShippedExpertParallelConfigsAreValid) {
  const Topology a = load_topology(std::string(MOE_CONFIGS_DIR) + "/1p1d-ep.yaml");
  ASSERT_EQ(a.instances.size(), 2u);
  for (const InstanceSpec& s : a.instances) {
    EXPECT_EQ(s.ep, 2);
    ASSERT_EQ(s.ranks.size(), 2u);
    EXPECT_EQ(s.ranks[1].name, s.name + "-rank1");
    EXPECT_FALSE(a.remote(s));
  }
  const Topology b = load_topology(std::string(MOE_CONFIGS_DIR) + "/2p1d-4hosts.yaml");
  ASSERT_EQ(b.hosts.size(), 4u);
  ASSERT_EQ(b.instances.size(), 3u);
  EXPECT_EQ(b.instances[1].ranks[1].port, 18513);
  const InstanceSpec& d = b.instances[2];
  EXPECT_EQ(d.ep, 4);
  ASSERT_EQ(d.ranks.size(), 4u);
  EXPECT_EQ(b.host_of(d.ranks[1])->name, "d0");
  EXPECT_EQ(b.host_of(d.ranks[2])->name, "d1");
  EXPECT_EQ(d.ranks[3].address, "10.0.0.4");
  EXPECT_EQ(d.ranks[3].port, 18523);
  EXPECT_TRUE(b.remote(d));
}

const std::string kHosts = R"(hosts:
  - {name: a, address: 10.0.0.1}
  - {name: b, address: 10.0.0.2}
  - {name: c, address: 10.0.0.3, model: /other/m.gguf}
)";

TEST(LaunchTopology, ExpertParallelGroupsOverHosts) {
  const Topology t = parse_topology(R"(model: m.gguf
hosts:
  - name: node-a
    address: 10.0.0.1
    user: moe
    ssh_port: 2222
    identity: /keys/id
    ssh_options: [StrictHostKeyChecking=no]
    model: /srv/m.gguf
    workdir: /srv
    binary: /opt/moengine
  - {name: node-b, address: 10.0.0.2, model: /srv/m.gguf, workdir: /srv, binary: /opt/moengine}
  - {name: here, address: 127.0.0.1, local: true}
defaults:
  mpirun_args: [--mca, btl, "self,tcp"]
instances:
  - name: prefill
    role: prefill
    ep: 2
    host: node-a
    placement: p.json
    replace_interval_s: 30
    replace_max_moves: 4
    replace_target_balance: 0.9
    ep_timeout_s: 20
  - {name: decode, role: decode, ep: 4, hosts: [node-a, node-b], count: 2, port: 9200, mpirun_args: [-x, FOO]}
  - {name: solo, role: decode, host: here}
)",
                                    "t.yaml");
  ASSERT_EQ(t.hosts.size(), 3u);
  const HostSpec& a = t.hosts[0];
  EXPECT_EQ(a.name, "node-a");
  EXPECT_EQ(a.address, "10.0.0.1");
  EXPECT_FALSE(a.local);
  EXPECT_EQ(a.user, "moe");
  EXPECT_EQ(a.ssh_port, 2222);
  EXPECT_EQ(a.identity, "/keys/id");
  EXPECT_EQ(a.ssh_options, (std::vector<std::string>{"StrictHostKeyChecking=no"}));
  EXPECT_EQ(a.model, "/srv/m.gguf");
  EXPECT_EQ(a.workdir, "/srv");
  EXPECT_EQ(a.binary, "/opt/moengine");
  EXPECT_EQ(t.hosts[1].ssh_port, 22);
  EXPECT_TRUE(t.hosts[2].local);
  EXPECT_EQ(t.hosts[2].binary, "moengine");

  ASSERT_EQ(t.instances.size(), 4u);
  const InstanceSpec& p = t.instances[0];
  EXPECT_EQ(p.name, "prefill-0");
  EXPECT_TRUE(p.group());
  EXPECT_EQ(p.ep, 2);
  EXPECT_EQ(p.ep_args, (std::vector<std::string>{"--placement", "p.json", "--replace-interval-s", "30", "--replace-max-moves", "4",
                                                 "--replace-target-balance", "0.9", "--ep-timeout-s", "20"}));
  EXPECT_EQ(p.mpirun_args, (std::vector<std::string>{"--mca", "btl", "self,tcp"}));
  ASSERT_EQ(p.ranks.size(), 2u);
  EXPECT_EQ(p.ranks[1].name, "prefill-0-rank1");
  EXPECT_EQ(p.ranks[1].host, 0);
  EXPECT_EQ(p.ranks[1].address, "10.0.0.1");
  EXPECT_TRUE(t.remote(p));

  // Four ranks over two hosts: two on each, in order; fixed ports run on over groups and ranks.
  for (int g = 0; g < 2; ++g) {
    const InstanceSpec& d = t.instances[size_t(1 + g)];
    EXPECT_EQ(d.name, "decode-" + std::to_string(g));
    EXPECT_EQ(d.entry, "decode");
    EXPECT_EQ(d.mpirun_args, (std::vector<std::string>{"--mca", "btl", "self,tcp", "-x", "FOO"}));
    ASSERT_EQ(d.ranks.size(), 4u);
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(d.ranks[size_t(r)].name, fmt::format("decode-{}-rank{}", g, r));
      EXPECT_EQ(d.ranks[size_t(r)].host, r < 2 ? 0 : 1);
      EXPECT_EQ(d.ranks[size_t(r)].address, r < 2 ? "10.0.0.1" : "10.0.0.2");
      EXPECT_EQ(d.ranks[size_t(r)].port, 9200 + 4 * g + r);
    }
  }
  const InstanceSpec& solo = t.instances[3];
  EXPECT_FALSE(solo.group());
  EXPECT_EQ(solo.ranks.at(0).name, "solo-0");
  EXPECT_EQ(solo.ranks.at(0).address, "127.0.0.1");
  EXPECT_EQ(solo.ranks.at(0).host, 2);
  EXPECT_FALSE(t.remote(solo));
}

// Drafting with the MTP layer on decode instances needs the layer's KV from the prefill
// instances: method mtp in the defaults reaches every entry, prefill ones included.
TEST(LaunchTopology, MtpInTheDefaultsReachesThePrefillInstances) {
  const Topology t = parse_topology(
      "model: m.gguf\ndefaults:\n  speculative_config: '{\"method\": \"mtp\", \"num_speculative_tokens\": 1}'\n"
      "instances:\n  - {name: p, role: prefill}\n  - {name: d, role: decode}\n",
      "t.yaml");
  ASSERT_EQ(t.instances.size(), 2u);
  for (const InstanceSpec& s : t.instances) EXPECT_EQ(s.speculative_config, R"({"method": "mtp", "num_speculative_tokens": 1})") << s.name;
}

TEST(LaunchTopology, ErrorsNameFileLineAndField) {
  const std::string base = "model: m.gguf\ninstances:\n";
  struct Case {
    std::string yaml;
    std::string expected;  // a part of the message
  };
  const std::vector<Case> cases{
      {"model: m.gguf\ninstances: [\n", "t.yaml:3:1: not valid YAML"},
      {base + "  - {name: u, role: both}\nproxys: {}\n", "t.yaml:4:1: proxys: unknown key (expected one of model, hosts, defaults"},
      {base + "  - name: u\n    role: both\n    thread: 2\n", "t.yaml:5:5: instances[0].thread: unknown key"},
      {base + "  - name: u\n    role: both\n    role: prefill\n", "t.yaml:5:5: instances[0].role: given twice"},
      {"instances: [{name: u, role: both}]\n", "t.yaml:1:1: model: missing"},
      {"model: m.gguf\n", "t.yaml:1:1: instances: must be a non-empty list"},
      {"model: m.gguf\ninstances: []\n", "t.yaml:2:12: instances: must be a non-empty list"},
      {base + "  - {role: both}\n", "t.yaml:3:5: instances[0].name: missing"},
      {base + "  - {name: u}\n", "t.yaml:3:5: instances[0].role: missing"},
      {base + "  - {name: u, role: prefil}\n", "t.yaml:3:21: instances[0].role: 'prefil' is not one of prefill, decode, both"},
      {base + "  - {name: u, role: both, port: http}\n", "t.yaml:3:33: instances[0].port: 'http' is not an integer"},
      {base + "  - {name: u, role: both, port: 70000}\n", "instances[0].port: 70000 is out of range [0, 65535]"},
      {base + "  - {name: u, role: both, port: 65535, count: 2}\n", "instances[0].port: 2 ports from port 65535 go past 65535"},
      {base + "  - {name: u, role: both, count: 0}\n", "instances[0].count: 0 is out of range"},
      {base + "  - {name: u, role: both, weight: 0}\n", "instances[0].weight: must be more than 0"},
      {base + "  - {name: u, role: both, kv_transport: rdma}\n", "instances[0].kv_transport: 'rdma' is not one of ucx, tcp"},
      {base + "  - {name: u, role: both, restart: always}\n", "instances[0].restart: 'always' is not one of never, on-failure"},
      {base + "  - {name: u, role: both, kv_cache_dtype: int4}\n",
       "instances[0].kv_cache_dtype: 'int4' is not one of auto, f32, f16, bf16, fp8_e4m3, q8_0"},
      {base + "  - {name: p, role: prefill, kv_cache_dtype: f32}\n  - {name: d, role: decode}\n",
       "t.yaml:4:5: instances[1].kv_cache_dtype: bf16 differs from the f32 of instances[0]: a decode instance reads the KV"},
      {base + "  - {name: u, role: both, speculative_config: '{\"method\": \"eagle\", \"num_speculative_tokens\": 1}'}\n",
       "t.yaml:3:47: instances[0].speculative_config: speculative config: method must be \"ngram\" or \"mtp\", got \"eagle\""},
      {base + "  - {name: p, role: prefill, speculative_config: '{\"method\": \"ngram\", \"num_speculative_tokens\": 1}'}\n  - {name: d, role: decode}\n",
       "instances[0].speculative_config: a prefill instance makes one token per request: it takes only method mtp"},
      {base + "  - {name: p, role: prefill}\n  - {name: d, role: decode, speculative_config: '{\"method\": \"mtp\", \"num_speculative_tokens\": 1}'}\n",
       "t.yaml:3:3: instances: decode instance d-0 drafts with the MTP layer, so it pulls that layer's KV too, and prefill instance p-0 "
       "does not keep it"},
      {base + "  - {name: u, role: both, args: --foo}\n", "instances[0].args: must be a list"},
      {base + "  - {name: u, role: both, threads: [1]}\n", "instances[0].threads: must be an integer"},
      {base + "  - {name: 'a b', role: both}\n", "instances[0].name: 'a b' must start with a letter or digit"},
      {base + "  - {name: u, role: both}\n  - {name: u, role: both}\n", "t.yaml:4:12: instances[1].name: 'u' is also the name of instances[0]"},
      {base + "  - {name: u, role: both, port: 9000, count: 2}\n  - {name: v, role: both, port: 9001}\n",
       "t.yaml:4:33: instances[1].port: port 9001 of v-0 is also the port of u-1"},
      {base + "  - {name: u, role: both, port: 8000}\n", "instances[0].port: port 8000 of u-0 is also the port of the proxy"},
      {base + "  - {name: p, role: prefill}\n", "t.yaml:3:3: instances: there are prefill instances but no decode instance"},
      {base + "  - {name: d, role: decode}\n", "instances: there are decode instances but no prefill instance"},
      {"model: {path: m.gguf, generate: {}}\ninstances: [{name: u, role: both}]\n", "t.yaml:1:8: model: give either path"},
      {"model: {generate: {arch: llama}}\ninstances: [{name: u, role: both}]\n", "model.generate.arch: 'llama' is not one of deepseek2, qwen3moe"},
      {"model: {generate: {typ: q8_0}}\ninstances: [{name: u, role: both}]\n", "t.yaml:1:20: model.generate.typ: unknown key"},
      {std::string(kMinimal) + "defaults: {threads: -1}\n", "t.yaml:5:21: defaults.threads: -1 is out of range"},
      {std::string(kMinimal) + "proxy: {port: 1, extra: 2}\n", "t.yaml:5:18: proxy.extra: unknown key"},
      {std::string(kMinimal) + "timeouts: {ready_s: 0}\n", "timeouts.ready_s: must be more than 0"},
      {"- a\n- b\n", "t.yaml: must be a map with at least the keys model and instances"},
      {base + "  - {name: u, role: both, ep: 2, port: 65535}\n", "instances[0].port: 2 ports from port 65535 go past 65535"},
      {base + "  - {name: u, role: both, ep: 0}\n", "instances[0].ep: 0 is out of range [1, 4096]"},
      {base + "  - {name: u, role: both, placement: p.json}\n",
       "t.yaml:3:38: instances[0].placement: is a setting of an expert-parallel group: give ep: N too"},
      {base + "  - {name: u, role: both, host: a, hosts: [a]}\n", "instances[0].hosts: give host (one) or hosts (a list), not both"},
      {base + "  - {name: u, role: both, ep: 2, hosts: [nowhere]}\n",
       "instances[0].hosts: 'nowhere' is not a host of the top-level hosts list"},
      {kHosts + base + "  - {name: u, role: both, ep: 3, hosts: [a, b]}\n", "instances[0].hosts: 3 ranks do not divide evenly over 2 hosts"},
      {kHosts + base + "  - {name: u, role: both, ep: 2, hosts: [a, c]}\n",
       "instances[0].hosts: hosts a and c differ in binary, model or workdir"},
      {kHosts + base + "  - {name: u, role: both, host: a, port: 9000}\n  - {name: v, role: both, host: a, port: 9000}\n",
       "instances[1].port: port 9000 of v-0 is also the port of u-0 on its host"},
      {"model: m.gguf\nhosts: [{name: a}]\n" + base.substr(14) + "  - {name: u, role: both}\n", "hosts[0].address: missing"},
      {"model: m.gguf\nhosts: [{name: a, address: 0.0.0.0}]\n" + base.substr(14) + "  - {name: u, role: both}\n",
       "hosts[0].address: must be an address the other hosts reach this one at"},
      {"model: m.gguf\nhosts: [{name: a, address: x, ssh_options: [BatchMode]}]\n" + base.substr(14) + "  - {name: u, role: both}\n",
       "hosts[0].ssh_options: 'BatchMode' is not Key=Value"},
      {kHosts + base + "  - {name: u, role: both}\n" + "hosts: []\n", "hosts: given twice"},
  };
  for (const Case& c : cases) {
    const std::string message = error_of(c.yaml);
    EXPECT_NE(message.find(c.expected), std::string::npos) << "input:\n" << c.yaml << "message: " << message << "\nexpected: " << c.expected;
  }
}

TEST(LaunchTopology, MissingFileIsNamed) {
  try {
    load_topology("/nonexistent/t.yaml");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/t.yaml: cannot open the topology file");
  }
}

}  // namespace
}  // namespace moe::launch
