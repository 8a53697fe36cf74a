// The command lines a topology turns into: serve and proxy flags, URLs, engine ids,
// thread shares, model names and paths, and shell quoting for --dry-run.
#include <gtest/gtest.h>

#include "launch/commands.h"
#include "proxy/instances_file.h"

namespace moe::launch {
namespace {

using Args = std::vector<std::string>;

TEST(LaunchCommands, ServeArgs) {
  InstanceSpec s;
  s.name = "prefill-0";
  s.role = InstanceRole::kPrefill;
  s.ranks = {{.name = "prefill-0", .address = "127.0.0.1"}};
  s.kv_transport = "tcp";
  s.args = {"--max-num-seqs", "8"};
  EXPECT_EQ(serve_args(s, "m.gguf", "tiny", 2, {9100}, "prefill-0"),
            (Args{"serve", "--model", "m.gguf", "--served-model-name", "tiny", "--role", "prefill", "--host", "127.0.0.1", "--port",
                  "9100", "--threads", "2", "--engine-id", "prefill-0", "--kv-transport", "tcp", "--kv-events-endpoint",
                  "tcp://127.0.0.1:*", "--max-num-seqs", "8"}));
  // A decode instance prefills nothing a router could send to it by prefix: no KV events.
  s.role = InstanceRole::kDecode;
  s.args.clear();
  EXPECT_EQ(serve_args(s, "m.gguf", "tiny", 2, {9100}, "decode-0"),
            (Args{"serve", "--model", "m.gguf", "--served-model-name", "tiny", "--role", "decode", "--host", "127.0.0.1", "--port",
                  "9100", "--threads", "2", "--engine-id", "decode-0", "--kv-transport", "tcp"}));
  // A KV dtype other than serve's default is passed on.
  s.kv_cache_dtype = "q8_0";
  EXPECT_EQ(serve_args(s, "m.gguf", "tiny", 2, {9100}, "decode-0"),
            (Args{"serve", "--model", "m.gguf", "--served-model-name", "tiny", "--role", "decode", "--host", "127.0.0.1", "--port",
                  "9100", "--threads", "2", "--engine-id", "decode-0", "--kv-transport", "tcp", "--kv-cache-dtype", "q8_0"}));
  // So is speculative decoding.
  s.speculative_config = R"({"method": "ngram", "num_speculative_tokens": 2})";
  EXPECT_EQ(serve_args(s, "m.gguf", "tiny", 2, {9100}, "decode-0"),
            (Args{"serve", "--model", "m.gguf", "--served-model-name", "tiny", "--role", "decode", "--host", "127.0.0.1", "--port",
                  "9100", "--threads", "2", "--engine-id", "decode-0", "--kv-transport", "tcp", "--kv-cache-dtype", "q8_0",
                  "--speculative-config", R"({"method": "ngram", "num_speculative_tokens": 2})"}));
}

const char* const kHostsTopology = R"(model: m.gguf
hosts:
  - {name: a, address: 10.0.0.1, user: moe, ssh_port: 2222, identity: /k/id, ssh_options: [StrictHostKeyChecking=no],
     model: /srv/m.gguf, workdir: /srv/run, binary: /opt/bin/moengine}
  - {name: b, address: 10.0.0.2, model: /srv/m.gguf, workdir: /srv/run, binary: /opt/bin/moengine}
  - {name: me, address: 127.0.0.1, local: true}
instances:
  - {name: p, role: prefill, ep: 2, placement: p.json}
  - {name: d, role: decode, ep: 4, hosts: [a, b], threads: 1, mpirun_args: [--mca, btl_tcp_if_include, veth0]}
  - {name: r, role: decode, host: a, port: 9300}
)";

ProcessContext context() {
  ProcessContext c;
  c.self = "/build/moengine";
  c.model_path = "/models/m.gguf";
  c.served_name = "m";
  c.ssh_config = "/run/ssh_config";
  c.as_root = true;
  c.cores = 8;
  return c;
}

TEST(LaunchCommands, AGroupHereRunsUnderMpirun) {
  const Topology t = parse_topology(kHostsTopology, "t.yaml");
  // Two ranks on this machine (of seven ranks, four remote, one remote plain): 8 cores, 4 each.
  EXPECT_EQ(shell_line(process_argv(t, t.instances[0], context(), {0, 0}, 0)),
            "mpirun --allow-run-as-root --bind-to none -np 2 --oversubscribe /build/moengine serve --model /models/m.gguf "
            "--served-model-name m --role prefill --host 127.0.0.1 --port 0 --threads 4 --engine-id p-0 --kv-transport ucx "
            "--kv-events-endpoint 'tcp://127.0.0.1:*' --ep 2 --placement p.json");
  // A restart asks for the ports the ranks had, with a new engine id.
  EXPECT_EQ(serve_args(t.instances[0], "m.gguf", "m", 1, {9001, 9002}, engine_id("p-0", 1)),
            (Args{"serve", "--model", "m.gguf", "--served-model-name", "m", "--role", "prefill", "--host", "127.0.0.1", "--port",
                  "9001,9002", "--threads", "1", "--engine-id", "p-0-r1", "--kv-transport", "ucx", "--kv-events-endpoint",
                  "tcp://127.0.0.1:*", "--ep", "2", "--placement", "p.json"}));
}

TEST(LaunchCommands, AGroupOverHostsStartsItsRanksThroughMpirunsSsh) {
  const Topology t = parse_topology(kHostsTopology, "t.yaml");
  EXPECT_EQ(shell_line(process_argv(t, t.instances[1], context(), {0, 0, 0, 0}, 0)),
            "mpirun --allow-run-as-root --bind-to none -np 4 --host 10.0.0.1:2,10.0.0.2:2 --map-by slot --mca plm_rsh_agent "
            "'ssh -F /run/ssh_config' --wdir /srv/run --mca btl_tcp_if_include veth0 /opt/bin/moengine serve --model /srv/m.gguf "
            "--served-model-name m --role decode --host 10.0.0.1,10.0.0.1,10.0.0.2,10.0.0.2 --port 0 --threads 1 --engine-id d-0 "
            "--kv-transport ucx --ep 4");
}

TEST(LaunchCommands, AnInstanceOnAnotherHostStartsOverSsh) {
  const Topology t = parse_topology(kHostsTopology, "t.yaml");
  EXPECT_EQ(process_argv(t, t.instances[2], context(), {9300}, 0),
            (Args{"ssh", "-F", "/run/ssh_config", "-tt", "a",
                  "cd /srv/run && exec /opt/bin/moengine serve --model /srv/m.gguf --served-model-name m --role decode --host "
                  "10.0.0.1 --port 9300 --engine-id r-0 --kv-transport ucx"}));
}

TEST(LaunchCommands, TheSshConfigNamesEveryRemoteHostByNameAndAddress) {
  const Topology t = parse_topology(kHostsTopology, "t.yaml");
  EXPECT_EQ(ssh_config_text(t),
            "# Written by moengine launch from the topology's hosts: ssh (and mpirun's ssh) read it with -F.\n"
            "Host a 10.0.0.1\n  HostName 10.0.0.1\n  Port 2222\n  BatchMode yes\n  User moe\n  IdentityFile /k/id\n"
            "  StrictHostKeyChecking=no\n"
            "Host b 10.0.0.2\n  HostName 10.0.0.2\n  Port 22\n  BatchMode yes\n");
  EXPECT_EQ(ssh_config_text(parse_topology("model: m\ninstances: [{name: u, role: both}]\n", "t.yaml")), "");
}

TEST(LaunchCommands, ProxyArgsNameOnlyWhatIsUsed) {
  ProxySpec p;
  p.port = 0;
  EXPECT_EQ(proxy_args(p, "run/proxy-instances.yaml", "m.gguf"),
            (Args{"proxy", "--host", "127.0.0.1", "--port", "0", "--tokenizer", "m.gguf", "--config", "run/proxy-instances.yaml"}));
  const ProxySpec full{.port = 0, .policy = "cost", .api_key = "k", .admin_key = "a", .args = {"--timeout-s", "5"}};
  EXPECT_EQ(proxy_args(full, "i.yaml", "m.gguf"),
            (Args{"proxy", "--host", "127.0.0.1", "--port", "0", "--tokenizer", "m.gguf", "--config", "i.yaml", "--policy", "cost",
                  "--api-key", "k", "--admin-key", "a", "--timeout-s", "5"}));
}

TEST(LaunchCommands, TheProxysInstancesFileHasNamesRolesUrlsWeightsAndGroups) {
  std::vector<InstanceSpec> in(3);
  in[0] = {.name = "decode-0", .role = InstanceRole::kDecode, .ranks = {{.name = "decode-0"}}};
  in[1] = {.name = "prefill-0", .role = InstanceRole::kPrefill, .ranks = {{.name = "prefill-0"}}, .weight = 2.5};
  in[2] = {.name = "u-0", .role = InstanceRole::kBoth, .ranks = {{.name = "u-0-rank0"}, {.name = "u-0-rank1"}}, .ep = 2};
  const std::vector<proxy::InstanceSpec> read = proxy::parse_instances_file(
      proxy_instances_file(in, {{"http://d:1"}, {"http://p:2"}, {"http://u:3", "http://u:4"}}), "written");
  ASSERT_EQ(read.size(), 4u);
  EXPECT_EQ(read[0].name, "decode-0");
  EXPECT_EQ(read[0].url, "http://d:1");
  EXPECT_EQ(read[0].role, proxy::InstanceRole::decode);
  EXPECT_EQ(read[0].group, "");
  EXPECT_EQ(read[1].role, proxy::InstanceRole::prefill);
  EXPECT_EQ(read[1].weight, 2.5);
  EXPECT_EQ(read[2].role, proxy::InstanceRole::both);
  EXPECT_EQ(read[2].weight, 1.0);
  EXPECT_EQ(read[2].name, "u-0-rank0");
  EXPECT_EQ(read[3].name, "u-0-rank1");
  EXPECT_EQ(read[3].url, "http://u:4");
  EXPECT_EQ(read[2].group, "u-0");
  EXPECT_EQ(read[3].group, "u-0");
}

TEST(LaunchCommands, Urls) {
  EXPECT_EQ(instance_url("127.0.0.1", 80), "http://127.0.0.1:80");
  EXPECT_EQ(instance_url("0.0.0.0", 81), "http://127.0.0.1:81");
  EXPECT_EQ(instance_url("::", 82), "http://[::1]:82");
  EXPECT_EQ(instance_url("fe80::1", 83), "http://[fe80::1]:83");
  EXPECT_EQ(instance_url("node7", 84), "http://node7:84");
}

TEST(LaunchCommands, EngineIdsChangeOnRestart) {
  EXPECT_EQ(engine_id("decode-0", 0), "decode-0");
  EXPECT_EQ(engine_id("decode-0", 2), "decode-0-r2");
}

TEST(LaunchCommands, ThreadsShareTheCoresAmongTheRanksHere) {
  const Topology t = parse_topology(R"(model: m.gguf
hosts: [{name: far, address: 10.0.0.9}]
instances:
  - {name: p, role: prefill, ep: 2}
  - {name: d, role: decode, count: 2}
  - {name: r, role: decode, host: far}
  - {name: f, role: decode, host: far, threads: 3}
)",
                                    "t.yaml");
  // Four ranks on this machine: 16 cores give 4 each; the remote one takes its host's cores.
  EXPECT_EQ(instance_threads(t, t.instances[0], 16), 4);
  EXPECT_EQ(instance_threads(t, t.instances[1], 16), 4);
  EXPECT_EQ(instance_threads(t, t.instances[1], 2), 1);
  EXPECT_EQ(instance_threads(t, t.instances[3], 16), 0);
  EXPECT_EQ(instance_threads(t, t.instances[4], 16), 3);
}

TEST(LaunchCommands, ModelNamesAndPaths) {
  ModelSpec m;
  EXPECT_EQ(served_model_name(m, "models/tiny.gguf"), "tiny");
  EXPECT_EQ(served_model_name(m, "models/tiny-hf/"), "tiny-hf");
  ModelSpec named;
  named.served_name = std::string("x");
  EXPECT_EQ(served_model_name(named, "models/tiny.gguf"), "x");
  GeneratedModel g;
  g.type = "q8_0";
  g.seed = 1;
  g.cache_dir = "/c";
  EXPECT_EQ(generated_model_path(g), "/c/deepseek2-tiny-q8_0-seed1.gguf");
  EXPECT_EQ(gen_model_args(g, "/o.gguf"),
            (Args{"gen-model", "--arch", "deepseek2", "--preset", "tiny", "--type", "q8_0", "--seed", "1", "--out", "/o.gguf"}));
}

TEST(LaunchCommands, ShellLineQuotes) {
  EXPECT_EQ(shell_line({"moengine", "serve", "--port", "0", "--api-key", "a b", "it's", ""}),
            "moengine serve --port 0 --api-key 'a b' 'it'\\''s' ''");
}

}  // namespace
}  // namespace moe::launch
