// The proxy's dashboard: GET /dashboard is the page, and GET /dashboard/state's figures
// are the proxy's own counters (the same as /metrics) and its instances, after a 1P1D
// deployment served streamed and whole requests, and one it refused; and headless
// Chromium renders the page of a deployment under load, without a console message.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "disagg/pd_answers.h"
#include "disagg/pd_processes.h"
#include "support/http_calls.h"

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
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(PdDashboard, ChromiumRendersThePageOfADeploymentUnderLoad) {
  if (testing::run_command("command -v chromium >/dev/null 2>&1").status != 0) {
    GTEST_SKIP() << "chromium is not installed (scripts/setup.sh installs it)";
  }
  const auto prefill = start("serve", "load-prefill", serve_args("prefill"));
  const auto decode = start("serve", "load-decode", serve_args("decode"));
  const auto proxy = start("proxy", "load-proxy", {"--port", "0", "--prefill", prefill->url(), "--decode", decode->url()});
  const std::string url = proxy->url();

  // Streams one after another while the browser polls.
  std::atomic<bool> stop{false};
  std::atomic<int> served{0};
  std::thread load([&] {
    for (int i = 0; !stop; ++i) {
      json body{{"model", "tiny"}, {"prompt", testing::words(16, i)}, {"max_tokens", 8}, {"temperature", 0}, {"stream", true}};
      if (testing::ask(url, "/v1/completions", body).status == 200) ++served;
    }
  });
  while (served < 4) std::this_thread::sleep_for(std::chrono::milliseconds(20));

  const std::string d = dir();
  const std::string chrome = "timeout 90 chromium --headless=new --no-sandbox --disable-gpu --user-data-dir=" + d +
                             "/chrome --window-size=1400,1000 --enable-logging=stderr --v=0 --virtual-time-budget=6000 ";
  const testing::CliResult dom = testing::run_command(chrome + "--dump-dom " + url + "/dashboard 2>" + d + "/chrome.err");
  const testing::CliResult shot =
      testing::run_command(chrome + "--screenshot=" + d + "/dashboard.png " + url + "/dashboard >/dev/null 2>>" + d + "/chrome.err");
  stop = true;
  load.join();
  ASSERT_EQ(dom.status, 0) << read_file(d + "/chrome.err");
  EXPECT_EQ(shot.status, 0);
  EXPECT_TRUE(std::filesystem::exists(d + "/dashboard.png"));

  const std::string& page = dom.out;
  // A row for each instance, up.
  for (const std::string& u : {prefill->url(), decode->url()}) {
    EXPECT_NE(page.find("<td class=\"name\">" + u + "</td>"), std::string::npos) << u << "\n" << page;
  }
  EXPECT_NE(page.find("<td class=\"up\">up</td>"), std::string::npos);
  // The latency chart has points, the routing table its legs, the totals the served requests.
  const size_t ttft = page.find("id=\"chart-ttft\"");
  ASSERT_NE(ttft, std::string::npos);
  const size_t ttft_end = page.find("</div>", page.find("</svg>", ttft));
  EXPECT_NE(page.substr(ttft, ttft_end - ttft).find("class=\"point\""), std::string::npos) << page;
  EXPECT_NE(page.find("<td class=\"text\">prefill</td>"), std::string::npos);
  EXPECT_NE(page.find("<td class=\"text\">decode</td>"), std::string::npos);
  EXPECT_NE(page.find("requests answered 200"), std::string::npos);
  EXPECT_NE(page.find("<div id=\"status\">policy cost;"), std::string::npos) << page;
  // The page logs nothing: no script error, no failed request.
  const std::string log = read_file(d + "/chrome.err");
  EXPECT_EQ(log.find(":CONSOLE"), std::string::npos) << log;
}

}  // namespace
}  // namespace moe
