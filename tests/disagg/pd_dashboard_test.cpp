// The proxy's dashboard: GET /dashboard is the page, and GET /dashboard/state's figures
// are the proxy's own counters (the same as /metrics) and its instances, after a 1P1D
// deployment served streamed and whole requests, and one it refused; and headless
// Chromium renders the page of a deployment with an expert-parallel group under load,
// without a console message.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "core/npy.h"
#include "disagg/pd_answers.h"
#include "disagg/pd_processes.h"
#include "support/http_calls.h"
#include "support/mpirun.h"

namespace moe {
namespace {

using nlohmann::json;
using testing::ServeProcess;

std::string dir() { return testing::test_dir("pd_dashboard"); }

std::unique_ptr<ServeProcess> start(const std::string& command, const std::string& name, const std::vector<std::string>& args) {
  return testing::start_ready(dir(), command, name, args);
}

std::vector<std::string> serve_args(const std::string& role) {
  return {"--model", testing::tiny_model(dir()), "--port", "0", "--served-model-name", "tiny", "--kv-cache-memory", "0.05",
          "--role", role};
}

// The sum of a Prometheus counter's samples whose labels include every `label="value"` given.
double counter(const std::string& page, const std::string& name, const std::vector<std::string>& labels) {
  const std::regex line("(^|\n)[^\n#]*" + name + R"(\{([^}]*)\} ([0-9.e+]+))");
  double sum = 0;
  for (auto it = std::sregex_iterator(page.begin(), page.end(), line); it != std::sregex_iterator(); ++it) {
    const std::string have = (*it)[2];
    bool all = true;
    for (const std::string& l : labels) all = all && have.find(l) != std::string::npos;
    if (all) sum += std::stod((*it)[3]);
  }
  return sum;
}

// The sum over the window's periods of a count ("requests") or of a latency's samples
// ("ttft_s": its "n").
int64_t series_total(const json& window, const std::string& field) {
  int64_t sum = 0;
  for (const json& p : window["series"]) sum += p[field].is_object() ? p[field]["n"].get<int64_t>() : p[field].get<int64_t>();
  return sum;
}

TEST(PdDashboard, StateIsTheProxysOwnCountersAndInstances) {
  const auto prefill = start("serve", "prefill", serve_args("prefill"));
  const auto decode = start("serve", "decode", serve_args("decode"));
  const auto proxy = start("proxy", "proxy", {"--port", "0", "--prefill", prefill->url(), "--decode", decode->url()});
  const std::string url = proxy->url();

  const testing::Reply page = testing::get(url, "/dashboard");
  ASSERT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("<title>moengine dashboard</title>"), std::string::npos);
  EXPECT_NE(page.body.find("fetch(\"/dashboard/state\""), std::string::npos);

  constexpr int kStreamed = 3, kWhole = 2;
  for (int i = 0; i < kStreamed + kWhole; ++i) {
    json body{{"model", "tiny"}, {"prompt", testing::words(20, i)}, {"max_tokens", 6}, {"temperature", 0}, {"stream", i < kStreamed}};
    ASSERT_EQ(testing::ask(url, "/v1/completions", body).status, 200);
  }
  ASSERT_EQ(testing::post_json(url, "/v1/completions", json{{"model", "tiny"}, {"prompt", "x"}, {"max_tokens", -1}}).status, 400);

  const json state = testing::get(url, "/dashboard/state").json();
  const std::string metrics = testing::get(url, "/metrics").body;

  ASSERT_EQ(state["instances"].size(), 2u);
  std::map<std::string, std::string> roles;
  for (const json& i : state["instances"]) {
    roles[i["url"]] = i["role"];
    EXPECT_TRUE(i["routable"].get<bool>()) << i.dump();
    EXPECT_EQ(i["breaker"], "closed");
  }
  EXPECT_EQ(roles[prefill->url()], "prefill");
  EXPECT_EQ(roles[decode->url()], "decode");

  const json& totals = state["window"]["totals"];
  EXPECT_EQ(totals["requests_by_status"]["200"], kStreamed + kWhole);
  EXPECT_EQ(totals["requests_by_status"]["400"], 1);
  for (const auto& [status, n] : totals["requests_by_status"].items()) {
    EXPECT_EQ(double(n.get<int64_t>()), counter(metrics, "proxy_requests_total", {"status=\"" + status + "\""})) << status;
  }
  EXPECT_EQ(totals["retries"], 0);
  EXPECT_EQ(totals["resumes"], 0);
  EXPECT_EQ(double(totals["resumes"].get<int64_t>()), counter(metrics, "proxy_stream_resumes_total", {}));

  EXPECT_EQ(state["routing"]["policy"], "cost");
  int64_t decisions = 0;
  for (const json& d : state["routing"]["decisions"]) {
    const std::string leg = d["leg"], reason = d["reason"];
    EXPECT_EQ(double(d["count"].get<int64_t>()),
              counter(metrics, "proxy_routing_decisions_total", {"leg=\"" + leg + "\"", "reason=\"" + reason + "\""}))
        << d.dump();
    decisions += d["count"].get<int64_t>();
  }
  // A prefill and a decode leg each, and the refused one's prefill leg (its P refuses it).
  EXPECT_EQ(decisions, 2 * (kStreamed + kWhole) + 1);

  // Every request fell in the window's periods: first tokens of the streams, the prefill
  // phase of every leg a P answered, the hand-off of every served request, and the
  // refusal as an error.
  int64_t requests = 0, errors = 0, ttft = 0, prefills = 0, handoffs = 0;
  for (const json& p : state["window"]["series"]) {
    requests += p["requests"].get<int64_t>();
    errors += p["errors"].get<int64_t>();
    ttft += p["ttft_s"]["n"].get<int64_t>();
    prefills += p["prefill_s"]["n"].get<int64_t>();
    handoffs += p["handoff_s"]["n"].get<int64_t>();
    if (p["ttft_s"]["n"].get<int64_t>() > 0) EXPECT_GT(p["ttft_s"]["p99"].get<double>(), 0);
  }
  EXPECT_EQ(requests, kStreamed + kWhole + 1);
  EXPECT_EQ(errors, 1);
  EXPECT_EQ(ttft, kStreamed);
  EXPECT_EQ(double(ttft), counter(metrics, "proxy_time_to_first_token_seconds_count", {}));
  EXPECT_EQ(double(prefills), counter(metrics, "proxy_prefill_seconds_count", {}));
  EXPECT_GE(prefills, kStreamed + kWhole);
  EXPECT_EQ(handoffs, kStreamed + kWhole);
  EXPECT_EQ(double(handoffs), counter(metrics, "proxy_handoff_seconds_count", {}));
  EXPECT_EQ(state["window"]["period_s"], 2.0);
  EXPECT_TRUE(state["window"]["slo"].is_null()) << "no --slo-ttft-ms or --slo-tpot-ms: no goodput";
}

// With SLOs, the window counts the streamed answers within them as goodput: all of them
// under a loose TTFT SLO, none under one no answer can meet.
TEST(PdDashboard, GoodputIsTheStreamedAnswersWithinTheSlos) {
  const auto prefill = start("serve", "slo-prefill", serve_args("prefill"));
  const auto decode = start("serve", "slo-decode", serve_args("decode"));
  for (const auto& [slo, want_good] : {std::pair{"60000", 3}, std::pair{"0.001", 0}}) {
    const auto proxy = start("proxy", std::string("slo-proxy-") + slo,
                             {"--port", "0", "--prefill", prefill->url(), "--decode", decode->url(), "--slo-ttft-ms", slo});
    for (int i = 0; i < 4; ++i) {
      json body{{"model", "tiny"}, {"prompt", testing::words(10, i)}, {"max_tokens", 4}, {"stream", i < 3}};
      ASSERT_EQ(testing::ask(proxy->url(), "/v1/completions", body).status, 200);
    }
    const json w = testing::get(proxy->url(), "/dashboard/state").json()["window"];
    EXPECT_DOUBLE_EQ(w["slo"]["ttft_s"].get<double>(), std::stod(slo) / 1000) << w["slo"].dump();
    EXPECT_TRUE(w["slo"]["tpot_s"].is_null());
    EXPECT_EQ(series_total(w, "good"), want_good) << "SLO " << slo << " ms";
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// DIR/skewed.gguf: the tiny model with a Zipf expert load (a few experts hot in each layer).
std::string skewed_model() {
  const std::string path = dir() + "/skewed.gguf";
  if (!std::filesystem::exists(path)) {
    const testing::CliResult r =
        testing::run_moengine("gen-model --arch deepseek2 --preset tiny --type q8_0 --expert-skew 2 --out " + path);
    if (r.status != 0) throw std::runtime_error(r.out);
  }
  return path;
}

std::string rank_url(int port) { return "http://127.0.0.1:" + std::to_string(port); }

bool healthy(const std::string& url) {
  try {
    return testing::get(url, "/health").status == 200;
  } catch (const std::exception&) {
    return false;
  }
}

// `serve --ep 2` of the skewed model under mpirun on two free ports (its log DIR/NAME.log),
// both ranks answering /health; throws with the log otherwise.
struct EpGroup {
  EpGroup(const std::string& name, const std::vector<std::string>& args) : base(testing::free_port_run(2)) {
    if (base <= 0) throw std::runtime_error("no two free ports in a row");
    std::vector<std::string> all{"--model", skewed_model(), "--port", std::to_string(base), "--ep", "2", "--threads", "1",
                                 "--served-model-name", "tiny", "--kv-cache-memory", "0.05"};
    all.insert(all.end(), args.begin(), args.end());
    process = std::make_unique<ServeProcess>(all, dir() + "/" + name + ".log", "serve", testing::mpirun_wrapper(2));
    const auto ready_by = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!(healthy(rank(0)) && healthy(rank(1)))) {
      if (std::chrono::steady_clock::now() > ready_by) throw std::runtime_error(name + " never became ready:\n" + process->log());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  std::string rank(int r) const { return rank_url(base + r); }

  int base;
  std::unique_ptr<ServeProcess> process;
};

// Per MoE layer, the expert with the most pairs in the group's recorded trace.
std::vector<int> hottest_experts(const std::string& rank) {
  const NpyArray t = parse_npy(testing::get(rank, "/admin/expert-trace").body, "expert trace");
  const int64_t steps = t.shape.at(0), layers = t.shape.at(1), experts = t.shape.at(2);
  std::vector<int> out;
  for (int64_t l = 0; l < layers; ++l) {
    std::vector<double> load(size_t(experts), 0.0);
    for (int64_t s = 0; s < steps; ++s) {
      for (int64_t e = 0; e < experts; ++e) load[size_t(e)] += t.data[size_t((s * layers + l) * experts + e)];
    }
    out.push_back(int(std::max_element(load.begin(), load.end()) - load.begin()));
  }
  return out;
}

// The part of the page from the element with id `id` to the end of its first chart.
std::string section(const std::string& page, const std::string& id) {
  const size_t at = page.find("id=\"" + id + "\"");
  if (at == std::string::npos) return "";
  return page.substr(at, page.find("</svg>", at) - at);
}

// A 1P1D deployment whose decode instance is an expert-parallel group of 2 ranks that
// re-places its experts live, under a streaming load, rendered by headless Chromium: a row
// per instance, points in the latency chart, the expert heatmap's hottest cell in each
// layer the expert the group's trace makes hottest, the imbalance chart, the re-placement
// that happened, and no console message.
TEST(PdDashboard, ChromiumRendersTheDeploymentAndItsExpertGroupUnderLoad) {
  if (testing::run_command("command -v chromium >/dev/null 2>&1").status != 0) {
    GTEST_SKIP() << "chromium is not installed (scripts/setup.sh installs it)";
  }
  if (testing::run_command("command -v mpirun >/dev/null 2>&1").status != 0) {
    GTEST_SKIP() << "mpirun is not installed (scripts/setup.sh installs it)";
  }
  const std::string d = dir(), model = skewed_model();
  const auto prefill = start("serve", "load-prefill",
                             {"--model", model, "--port", "0", "--served-model-name", "tiny", "--kv-cache-memory", "0.05", "--role", "prefill"});
  const EpGroup decode("load-decode", {"--role", "decode", "--replace-interval-s", "1", "--replace-max-moves", "4"});
  const std::string rank0 = decode.rank(0), rank1 = decode.rank(1);
  const std::string instances = d + "/instances.yaml";
  std::ofstream(instances) << "instances:\n"
                           << "  - {name: prefill, role: prefill, url: " << prefill->url() << "}\n"
                           << "  - {name: decode-rank0, role: decode, group: decode, url: " << rank0 << "}\n"
                           << "  - {name: decode-rank1, role: decode, group: decode, url: " << rank1 << "}\n";
  const auto proxy = start("proxy", "load-proxy", {"--port", "0", "--config", instances, "--slo-ttft-ms", "5000", "--slo-tpot-ms", "2000"});
  const std::string url = proxy->url();

  // Streams one after another while the browser polls.
  std::atomic<bool> stop{false};
  std::atomic<int> served{0};
  std::thread load([&] {
    for (int i = 0; !stop; ++i) {
      json body{{"model", "tiny"}, {"prompt", testing::words(16, i)}, {"max_tokens", 16}, {"temperature", 0}, {"stream", true}};
      if (testing::ask(url, "/v1/completions", body).status == 200) ++served;
    }
  });
  // Enough steps for a steady heatmap, and a re-placement switched in.
  bool replaced = false;
  const auto replaced_by = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!replaced && std::chrono::steady_clock::now() < replaced_by) {
    const json s = testing::get(rank0, "/admin/expert-state").json();
    for (const json& e : s["replacements"]) replaced |= e["switched"].get<bool>();
    replaced = replaced && s["window"]["steps"].get<int64_t>() >= 400;
    if (!replaced) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }

  const std::string chrome = "timeout 90 chromium --headless=new --no-sandbox --disable-gpu --user-data-dir=" + d +
                             "/chrome --window-size=1400,1500 --enable-logging=stderr --v=0 --virtual-time-budget=6000 ";
  const testing::CliResult dom = testing::run_command(chrome + "--dump-dom " + url + "/dashboard 2>" + d + "/chrome.err");
  const testing::CliResult shot =
      testing::run_command(chrome + "--screenshot=" + d + "/dashboard.png " + url + "/dashboard >/dev/null 2>>" + d + "/chrome.err");
  stop = true;
  load.join();
  ASSERT_TRUE(replaced) << "no re-placement within 60 s\n" << decode.process->log();
  ASSERT_EQ(dom.status, 0) << read_file(d + "/chrome.err");
  EXPECT_EQ(shot.status, 0);
  EXPECT_TRUE(std::filesystem::exists(d + "/dashboard.png"));
  EXPECT_GT(served, 4);

  const std::string& page = dom.out;
  // A row for each instance, up.
  for (const std::string& name : {"prefill", "decode-rank0", "decode-rank1"}) {
    EXPECT_NE(page.find("<td class=\"name\">" + std::string(name) + "</td>"), std::string::npos) << name << "\n" << page;
  }
  EXPECT_NE(page.find("<td class=\"up\">up</td>"), std::string::npos);
  // The latency chart has points, the routing table its legs, the totals the served requests.
  EXPECT_NE(section(page, "chart-ttft").find("class=\"point\""), std::string::npos) << page;
  EXPECT_NE(page.find("<td class=\"text\">prefill</td>"), std::string::npos);
  EXPECT_NE(page.find("<td class=\"text\">decode</td>"), std::string::npos);
  EXPECT_NE(page.find("requests answered 200"), std::string::npos);
  EXPECT_NE(page.find("<div id=\"status\">policy cost;"), std::string::npos) << page;
  const size_t rate = page.find("id=\"chart-rate\"");
  ASSERT_NE(rate, std::string::npos);
  EXPECT_NE(page.substr(rate, page.find("id=\"chart-ttft\"") - rate).find("goodput (TTFT &lt;= 5.00 s, TPOT &lt;= 2.00 s)"),
            std::string::npos)
      << page;

  // The expert view: each layer's hottest cell is the trace's hottest expert.
  const std::string heat = section(page, "ep-0-load");
  ASSERT_FALSE(heat.empty()) << page;
  const std::vector<int> hottest = hottest_experts(rank1);
  const std::regex hot(R"re(class="cell hot" data-layer="(\d+)" data-column="(\d+)")re");
  std::map<int, int> shown;
  for (auto it = std::sregex_iterator(heat.begin(), heat.end(), hot); it != std::sregex_iterator(); ++it) {
    shown[std::stoi((*it)[1])] = std::stoi((*it)[2]);
  }
  ASSERT_EQ(shown.size(), hottest.size()) << heat;
  for (size_t l = 0; l < hottest.size(); ++l) EXPECT_EQ(shown[int(l)], hottest[l]) << "layer " << l << "\n" << heat;
  EXPECT_NE(section(page, "ep-0-ranks").find("class=\"cell hot\""), std::string::npos) << page;
  EXPECT_NE(section(page, "ep-0-imbalance").find("class=\"point\""), std::string::npos) << page;
  EXPECT_NE(section(page, "ep-0-layers").find("class=\"cell"), std::string::npos) << page;
  // The pools: prefill and decode, every instance up.
  EXPECT_NE(page.find("<td class=\"text\">decode</td><td class=\"up\">2 / 2</td>"), std::string::npos) << page;
  EXPECT_NE(page.find("<td class=\"text\">prefill</td><td class=\"up\">1 / 1</td>"), std::string::npos) << page;
  EXPECT_NE(page.find("switched at step"), std::string::npos) << page;
  // The page logs nothing: no script error, no failed request.
  const std::string log = read_file(d + "/chrome.err");
  EXPECT_EQ(log.find(":CONSOLE"), std::string::npos) << log;
}

// A lone `moengine serve --ep 2` serves the page too: its state is the instance itself, the
// requests it answered as its clients saw them, and its group's expert view; Chromium
// renders it with the proxy's sections left out.
TEST(PdDashboard, ALoneExpertParallelServeHasThePageOfItsOwn) {
  if (testing::run_command("command -v mpirun >/dev/null 2>&1").status != 0) {
    GTEST_SKIP() << "mpirun is not installed (scripts/setup.sh installs it)";
  }
  const std::string d = dir();
  const EpGroup group("lone", {});
  const std::string rank0 = group.rank(0);

  const testing::Reply page = testing::get(rank0, "/dashboard");
  ASSERT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("<title>moengine dashboard</title>"), std::string::npos);
  constexpr int kStreamed = 3, kWhole = 2;
  for (int i = 0; i < kStreamed + kWhole; ++i) {
    json body{{"model", "tiny"}, {"prompt", testing::words(12, i)}, {"max_tokens", 8}, {"ignore_eos", true}, {"stream", i < kStreamed}};
    ASSERT_EQ(testing::ask(rank0, "/v1/completions", body).status, 200);
  }
  ASSERT_EQ(testing::post_json(rank0, "/v1/completions", json{{"model", "tiny"}, {"prompt", "x"}, {"max_tokens", -1}}).status, 400);

  const json state = testing::get(rank0, "/dashboard/state").json();
  EXPECT_FALSE(state.contains("routing"));
  ASSERT_EQ(state["instances"].size(), 1u);
  const json& self = state["instances"][0];
  EXPECT_EQ(self["role"], "both");
  EXPECT_EQ(self["group"], "this group");
  EXPECT_EQ(self["reported"]["requests_finished"], kStreamed + kWhole);
  EXPECT_EQ(self["reported"]["generation_tokens"], 8 * (kStreamed + kWhole));
  const json& totals = state["window"]["totals"]["requests_by_status"];
  EXPECT_EQ(totals["200"], kStreamed + kWhole);
  EXPECT_EQ(totals["400"], 1);
  const json& w = state["window"];
  EXPECT_EQ(series_total(w, "requests"), kStreamed + kWhole + 1);
  EXPECT_EQ(series_total(w, "errors"), 1);
  // Every answered request had a first token and more tokens after it.
  EXPECT_EQ(series_total(w, "ttft_s"), kStreamed + kWhole);
  EXPECT_EQ(series_total(w, "tpot_s"), kStreamed + kWhole);
  EXPECT_EQ(series_total(w, "e2e_s"), kStreamed + kWhole);
  const json& view = state["expert_groups"]["this group"];
  EXPECT_EQ(view["state"]["ranks"], 2);
  EXPECT_GT(view["state"]["window"]["synced_steps"].get<int64_t>(), 0);

  if (testing::run_command("command -v chromium >/dev/null 2>&1").status != 0) {
    GTEST_SKIP() << "chromium is not installed (scripts/setup.sh installs it): the page was not rendered";
  }
  const testing::CliResult dom = testing::run_command("timeout 90 chromium --headless=new --no-sandbox --disable-gpu --user-data-dir=" + d +
                                                      "/chrome-lone --enable-logging=stderr --v=0 --virtual-time-budget=3000 --dump-dom " +
                                                      rank0 + "/dashboard 2>" + d + "/chrome-lone.err");
  ASSERT_EQ(dom.status, 0) << read_file(d + "/chrome-lone.err");
  EXPECT_NE(dom.out.find("<td class=\"name\">" + self["name"].get<std::string>() + "</td>"), std::string::npos) << dom.out;
  EXPECT_NE(dom.out.find("this instance alone (no proxy)"), std::string::npos) << dom.out;
  EXPECT_NE(dom.out.find("<div id=\"routing-section\" hidden=\"\">"), std::string::npos) << dom.out;
  EXPECT_NE(section(dom.out, "ep-0-load").find("class=\"cell hot\""), std::string::npos) << dom.out;
  EXPECT_NE(dom.out.find("requests answered 400"), std::string::npos) << dom.out;
  EXPECT_EQ(read_file(d + "/chrome-lone.err").find(":CONSOLE"), std::string::npos) << read_file(d + "/chrome-lone.err");
}

}  // namespace
}  // namespace moe
