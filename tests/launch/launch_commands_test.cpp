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
  s.host = "127.0.0.1";
  s.kv_transport = "tcp";
  s.args = {"--max-num-seqs", "8"};
  EXPECT_EQ(serve_args(s, "m.gguf", "tiny", 2, 9100, "prefill-0"),
            (Args{"serve", "--model", "m.gguf", "--served-model-name", "tiny", "--role", "prefill", "--host", "127.0.0.1", "--port",
                  "9100", "--threads", "2", "--engine-id", "prefill-0", "--kv-transport", "tcp", "--kv-events-endpoint",
                  "tcp://127.0.0.1:*", "--max-num-seqs", "8"}));
  // A decode instance prefills nothing a router could send to it by prefix: no KV events.
  s.role = InstanceRole::kDecode;
  s.args.clear();
  EXPECT_EQ(serve_args(s, "m.gguf", "tiny", 2, 9100, "decode-0"),
            (Args{"serve", "--model", "m.gguf", "--served-model-name", "tiny", "--role", "decode", "--host", "127.0.0.1", "--port",
                  "9100", "--threads", "2", "--engine-id", "decode-0", "--kv-transport", "tcp"}));
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

TEST(LaunchCommands, TheProxysInstancesFileHasNamesRolesUrlsAndWeights) {
  std::vector<InstanceSpec> in(3);
  in[0] = {.name = "decode-0", .role = InstanceRole::kDecode};
  in[1] = {.name = "prefill-0", .role = InstanceRole::kPrefill, .weight = 2.5};
  in[2] = {.name = "u", .role = InstanceRole::kBoth};
  const std::vector<proxy::InstanceSpec> read =
      proxy::parse_instances_file(proxy_instances_file(in, {"http://d:1", "http://p:2", "http://u:3"}), "written");
  ASSERT_EQ(read.size(), 3u);
  EXPECT_EQ(read[0].name, "decode-0");
  EXPECT_EQ(read[0].url, "http://d:1");
  EXPECT_EQ(read[0].role, proxy::InstanceRole::decode);
  EXPECT_EQ(read[1].role, proxy::InstanceRole::prefill);
  EXPECT_EQ(read[1].weight, 2.5);
  EXPECT_EQ(read[2].role, proxy::InstanceRole::both);
  EXPECT_EQ(read[2].weight, 1.0);
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

TEST(LaunchCommands, ThreadsShareTheCores) {
  InstanceSpec s;
  EXPECT_EQ(instance_threads(s, 4, 16), 4);
  EXPECT_EQ(instance_threads(s, 3, 2), 1);
  s.threads = 5;
  EXPECT_EQ(instance_threads(s, 4, 16), 5);
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
