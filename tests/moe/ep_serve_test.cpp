// `moengine serve --ep N` under mpirun: every rank an OpenAI server of its own (on --port
// plus its rank) with its own scheduler and KV cache, the routed experts spread over the
// ranks. Greedy answers to concurrent requests at every rank equal a single process's;
// SIGTERM stops the whole group cleanly; a rank killed is an error, not a hang.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <set>
#include <thread>

#include "core/npy.h"
#include "ep_placements.h"
#include "support/http_calls.h"
#include "support/mpirun.h"
#include "support/run_cli.h"
#include "support/serve_process.h"

namespace moe {
namespace {

using namespace std::chrono_literals;
using testing::ServeProcess;

std::string model_file(const std::string& arch, const std::string& extra = "", const std::string& name = "") {
  const std::string path = testing::test_dir("ep_serve_test") + "/" + (name.empty() ? arch : name) + ".gguf";
  EXPECT_EQ(testing::run_moengine("gen-model --arch " + arch + " --preset tiny --type q8_0 --out " + path + " " + extra).status, 0);
  return path;
}

std::string url(int port) { return "http://127.0.0.1:" + std::to_string(port); }

bool healthy(int port) {
  try {
    return testing::get(url(port), "/health").status == 200;
  } catch (const std::exception&) {
    return false;
  }
}

// Waits (at most 60 s) until every rank answers /health.
bool group_ready(int base, int ranks) {
  const auto end = std::chrono::steady_clock::now() + 60s;
  for (int r = 0; r < ranks; ++r) {
    while (!healthy(base + r)) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(50ms);
    }
  }
  return true;
}

// The ranks' pids: the group's process is `timeout`, its child mpirun, whose children are
// the ranks.
std::vector<pid_t> rank_pids(pid_t group) {
  const std::string mpirun = testing::run_command("pgrep -P " + std::to_string(group)).out;
  if (mpirun.empty()) return {};
  const std::string pids = testing::run_command("pgrep -P " + std::to_string(std::stoi(mpirun)) + " -x moengine | sort -n").out;
  std::vector<pid_t> ranks;
  for (size_t at = 0; at < pids.size();) {
    const size_t nl = pids.find('\n', at);
    ranks.push_back(std::stoi(pids.substr(at, nl - at)));
    at = nl == std::string::npos ? pids.size() : nl + 1;
  }
  return ranks;
}

// The exit status of the group's process, or -1 when it did not end within `limit`.
int wait_exit(pid_t pid, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    int st = 0;
    if (::waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    std::this_thread::sleep_for(50ms);
  }
  return -1;
}

std::string complete(const std::string& base_url, const std::string& model, const std::string& prompt) {
  const nlohmann::json body = {{"model", model}, {"prompt", prompt}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}};
  const testing::Reply r = testing::post_json(base_url, "/v1/completions", body);
  EXPECT_EQ(r.status, 200) << r.body;
  return r.status == 200 ? r.json()["choices"][0]["text"].get<std::string>() : r.body;
}

const std::vector<std::string> kPrompts = {"The experts are here", "Serving many models", "A short one",
                                           "Mixture of experts routes every token to a few of them",
                                           "Hello", "Decode steps run in lockstep", "x y z", "Prefill and decode"};

// Greedy answers of a single process to every prompt.
std::vector<std::string> reference(const std::string& model) {
  ServeProcess alone({"-m", model, "--port", "0", "--threads", "1"}, testing::test_dir("ep_serve_test") + "/alone.log");
  const std::string u = alone.url();
  std::vector<std::string> out;
  for (const std::string& p : kPrompts) out.push_back(complete(u, model, p));
  EXPECT_EQ(alone.stop(), 0);
  return out;
}

// Every token-expert pair the ranks computed is in the group's trace, which every rank
// serves whole once the group is idle again. A step sends its answers before it refreshes
// the metrics, so both are read again until they agree.
void expect_load_recorded(int base, int ranks) {
  auto computed_by_all = [&] {
    double computed = 0;
    for (int r = 0; r < ranks; ++r) {
      computed += testing::metric(testing::get(url(base + r), "/metrics").body, "ep_expert_tokens_total");
    }
    return computed;
  };
  for (int r = 0; r < ranks; ++r) {
    const std::string page = testing::get(url(base + r), "/metrics").body;
    EXPECT_GT(testing::metric(page, "ep_expert_tokens_total"), 0) << "rank " << r << " computed nothing\n" << page;
    EXPECT_GE(testing::metric(page, "ep_load_imbalance"), 1.0) << page;
  }
  for (int r = 0; r < ranks; ++r) {
    double traced = -1, computed = -2;
    const auto end = std::chrono::steady_clock::now() + 10s;
    while (traced != computed && std::chrono::steady_clock::now() < end) {
      const testing::Reply reply = testing::get(url(base + r), "/admin/expert-trace");
      ASSERT_EQ(reply.status, 200);
      const NpyArray a = parse_npy(reply.body, "expert trace");
      ASSERT_EQ(a.shape.size(), 3u);
      traced = 0;
      for (const float v : a.data) traced += v;
      computed = computed_by_all();
      if (traced != computed) std::this_thread::sleep_for(20ms);
    }
    EXPECT_EQ(traced, computed) << "rank " << r;
  }
}

// Every prompt at every rank at once: each rank batches its own requests while the
// others' tokens pass through its experts.
void expect_answers(int base, int ranks, const std::string& model, const std::vector<std::string>& want) {
  std::vector<std::future<std::string>> answers;
  for (int r = 0; r < ranks; ++r) {
    for (const std::string& p : kPrompts) {
      answers.push_back(std::async(std::launch::async, [&, r, p] { return complete(url(base + r), model, p); }));
    }
  }
  for (size_t i = 0; i < answers.size(); ++i) EXPECT_EQ(answers[i].get(), want[i % kPrompts.size()]) << "request " << i;
}

// SIGTERM to every rank, as mpirun passes one on (mpirun itself would then exit with
// status 1 and kill ranks that take long to stop): they stop together and exit cleanly.
void expect_clean_stop(ServeProcess& group, int ranks) {
  const std::vector<pid_t> pids = rank_pids(group.pid());
  ASSERT_EQ(pids.size(), size_t(ranks));
  for (const pid_t pid : pids) ::kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(group.pid(), 60s), 0) << group.log();
  const std::string log = group.log();
  size_t stopped = 0;
  for (size_t at = log.find("shutting down"); at != std::string::npos; at = log.find("shutting down", at + 1)) ++stopped;
  EXPECT_EQ(stopped, size_t(ranks)) << log;
  EXPECT_EQ(log.find("error"), std::string::npos) << log;
}

void expect_group_answers_like_one_process(const std::string& model, int ranks) {
  const std::vector<std::string> want = reference(model);
  const int base = testing::free_port_run(ranks);
  ASSERT_GT(base, 0);
  ServeProcess group({"-m", model, "--port", std::to_string(base), "--threads", "1", "--ep", std::to_string(ranks)},
                     testing::test_dir("ep_serve_test") + "/group.log", "serve", testing::mpirun_wrapper(ranks));
  ASSERT_TRUE(group_ready(base, ranks)) << group.log();
  expect_answers(base, ranks, model, want);
  expect_load_recorded(base, ranks);
  expect_clean_stop(group, ranks);
}

// The MoE layers in the group's expert trace, and the routed pairs of the last one, once the
// trace has some (it is synced every few steps).
std::pair<int64_t, double> traced_last_layer(int base) {
  const auto end = std::chrono::steady_clock::now() + 10s;
  std::pair<int64_t, double> out{0, 0.0};
  while (std::chrono::steady_clock::now() < end) {
    const NpyArray a = parse_npy(testing::get(url(base), "/admin/expert-trace").body, "expert trace");
    if (a.shape.size() != 3) return out;
    out.first = a.shape[1];
    out.second = 0;
    const size_t experts = size_t(a.shape[2]), layers = size_t(a.shape[1]);
    for (size_t s = 0; s < size_t(a.shape[0]); ++s) {
      for (size_t e = 0; e < experts; ++e) out.second += a.data[(s * layers + layers - 1) * experts + e];
    }
    if (out.second > 0) return out;
    std::this_thread::sleep_for(20ms);
  }
  return out;
}

// Under speculative decoding the ranks verify their drafts in the group's steps, the
// experts of the drafted tokens computed across ranks like any others, and so are the MTP
// layer's own (one more MoE layer in the group's map and trace): the answers are a single
// process's without drafts.
TEST(EpServe, RanksThatSpeculateAnswerLikeOneProcessWithoutDrafts) {
  struct Case {
    std::string model, config, counter;
  };
  const std::vector<Case> cases{
      // A fixed draft length, so that n-gram drafts are verified every step whatever their
      // fate, and some are accepted.
      {model_file("deepseek2"), R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "adaptive": false})",
       "spec_decode_num_accepted_tokens_total"},
      // A random MTP layer's drafts are hardly ever right: that they were verified is what counts.
      {model_file("deepseek2", "--nextn-layers 1", "deepseek2-mtp"), R"({"method": "mtp", "num_speculative_tokens": 2})",
       "spec_decode_num_draft_tokens_total"}};
  int64_t decoder_moe_layers = 0;
  for (const Case& c : cases) {
    const std::vector<std::string> want = reference(c.model);
    const int base = testing::free_port_run(2);
    ASSERT_GT(base, 0);
    ServeProcess group({"-m", c.model, "--port", std::to_string(base), "--threads", "1", "--ep", "2", "--speculative-config", c.config},
                       testing::test_dir("ep_serve_test") + "/speculative-" + std::filesystem::path(c.model).stem().string() + ".log", "serve", testing::mpirun_wrapper(2));
    ASSERT_TRUE(group_ready(base, 2)) << group.log();
    expect_answers(base, 2, c.model, want);
    for (int r = 0; r < 2; ++r) {
      const std::string page = testing::get(url(base + r), "/metrics").body;
      EXPECT_GT(testing::metric(page, c.counter), 0) << c.config << " rank " << r << "\n" << page;
    }
    const auto [layers, last_layer_pairs] = traced_last_layer(base);
    if (c.config.find("mtp") == std::string::npos) {
      decoder_moe_layers = layers;
    } else {
      EXPECT_EQ(layers, decoder_moe_layers + 1);
      EXPECT_GT(last_layer_pairs, 0) << "the MTP layer's experts were not run across the group";
    }
    expect_clean_stop(group, 2);
  }
}

TEST(EpServe, DeepSeekRanksAnswerLikeOneProcess) { expect_group_answers_like_one_process(model_file("deepseek2"), 2); }

TEST(EpServe, Qwen3MoeFourRanksAnswerLikeOneProcess) { expect_group_answers_like_one_process(model_file("qwen3moe"), 4); }

TEST(EpServe, Qwen3MoeOneRankAnswersLikeOneProcess) { expect_group_answers_like_one_process(model_file("qwen3moe"), 1); }

// GET /admin/expert-state after re-placements from `initial`: both ranks show the same
// group, whose load is the trace's, whose pairs computed are the pairs routed, whose
// replicas changed from `initial`, and whose re-placements moved experts within the bound
// and no more bytes than the ranks' counters say they copied (each copy counted by both
// sides: `moved_both_sides`).
void expect_expert_state(int base, const nlohmann::json& initial, double moved_both_sides) {
  const nlohmann::json a = testing::get(url(base), "/admin/expert-state").json();
  const nlohmann::json b = testing::get(url(base + 1), "/admin/expert-state").json();
  EXPECT_EQ(a["rank"], 0);
  EXPECT_EQ(b["rank"], 1);
  EXPECT_EQ(a["ranks"], 2);
  EXPECT_EQ(a["replicas"], b["replicas"]);
  EXPECT_EQ(a["replacement"]["max_moves"], 4);
  const nlohmann::json& w = a["window"];
  const int64_t layers = a["moe_layers"], experts = a["experts"];
  ASSERT_EQ(w["load"].size(), size_t(layers));
  ASSERT_EQ(w["rank_pairs"].size(), size_t(layers));
  double routed = 0, computed = 0;
  for (int64_t l = 0; l < layers; ++l) {
    ASSERT_EQ(w["load"][l].size(), size_t(experts));
    for (const auto& v : w["load"][l]) routed += v.get<double>();
    for (const auto& v : w["rank_pairs"][l]) computed += v.get<double>();
  }
  EXPECT_GT(routed, 0);
  EXPECT_EQ(routed, computed);
  const NpyArray trace = parse_npy(testing::get(url(base), "/admin/expert-trace").body, "expert trace");
  double traced = 0;
  for (const float v : trace.data) traced += v;
  EXPECT_EQ(traced, routed) << "the idle group's window changed between the two calls";

  // The initial placement as [layer][rank] -> experts held.
  nlohmann::json held = nlohmann::json::array();
  for (const nlohmann::json& l : initial["layers"]) {
    std::vector<std::set<int>> on(2);
    for (size_t s = 0; s < l["slots"].size(); ++s) on[l["devices"][s].get<size_t>()].insert(l["slots"][s].get<int>());
    held.push_back({std::vector<int>(on[0].begin(), on[0].end()), std::vector<int>(on[1].begin(), on[1].end())});
  }
  ASSERT_EQ(a["replicas"].size(), held.size());
  EXPECT_NE(a["replicas"], held) << "no replica moved";
  int switched = 0;
  double bytes = 0;
  for (const nlohmann::json& e : a["replacements"]) {
    EXPECT_GT(e["moves"].get<int64_t>(), 0) << e.dump();
    EXPECT_LE(e["moves"].get<int64_t>(), 4) << e.dump();
    EXPECT_GT(e["bytes"].get<double>(), 0) << e.dump();
    EXPECT_GT(e["balance_after"].get<double>(), e["balance_before"].get<double>()) << e.dump();
    if (e["switched"].get<bool>()) {
      ++switched;
      bytes += e["bytes"].get<double>();
      EXPECT_GE(e["switched_step"].get<int64_t>(), e["planned_step"].get<int64_t>());
    }
  }
  EXPECT_GE(switched, 1) << a.dump();
  EXPECT_LE(bytes, moved_both_sides / 2);
  EXPECT_EQ(a["periods"]["period_s"], 2.0);
  EXPECT_FALSE(a["periods"]["series"].empty());
}

// From a poor placement, the group re-places its experts while it serves (a plan asked for
// every 10 ms): answers before and after the switches are a single process's.
TEST(EpServe, LiveRePlacementWhileServingKeepsTheAnswers) {
  const std::string model = model_file("deepseek2");
  const std::vector<std::string> want = reference(model);
  const std::string placement =
      testing::write_placement(testing::test_dir("ep_serve_test") + "/lopsided.json", testing::lopsided_placement(2, 2));
  const int base = testing::free_port_run(2);
  ASSERT_GT(base, 0);
  ServeProcess group({"-m", model, "--port", std::to_string(base), "--threads", "1", "--ep", "2", "--placement", placement,
                      "--replace-interval-s", "0.01", "--replace-max-moves", "4"},
                     testing::test_dir("ep_serve_test") + "/live.log", "serve", testing::mpirun_wrapper(2));
  ASSERT_TRUE(group_ready(base, 2)) << group.log();
  expect_answers(base, 2, model, want);
  // The idle group goes on joining steps every 2 ms, so the plan made from the recorded
  // load is copied and switched in without more traffic.
  double switched = 0;
  const auto end = std::chrono::steady_clock::now() + 20s;
  while (switched < 1 && std::chrono::steady_clock::now() < end) {
    switched = testing::metric(testing::get(url(base), "/metrics").body, "ep_replacements_total");
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_GE(switched, 1) << group.log();
  const std::string page = testing::get(url(base + 1), "/metrics").body;
  EXPECT_GE(testing::metric(page, "ep_replacements_total"), 1) << page;
  const double moved = testing::metric(testing::get(url(base), "/metrics").body, "ep_expert_bytes_moved_total") +
                       testing::metric(page, "ep_expert_bytes_moved_total");
  EXPECT_GT(moved, 0);
  expect_expert_state(base, testing::lopsided_placement(2, 2), moved);
  expect_answers(base, 2, model, want);
  expect_clean_stop(group, 2);
}

TEST(EpServe, AKilledRankEndsTheGroupWithAnError) {
  const std::string model = model_file("deepseek2");
  const int base = testing::free_port_run(2);
  ASSERT_GT(base, 0);
  ServeProcess group({"-m", model, "--port", std::to_string(base), "--threads", "1", "--ep", "2", "--ep-timeout-s", "5"},
                     testing::test_dir("ep_serve_test") + "/killed.log", "serve", testing::mpirun_wrapper(2));
  ASSERT_TRUE(group_ready(base, 2)) << group.log();
  const std::vector<pid_t> ranks = rank_pids(group.pid());
  ASSERT_EQ(ranks.size(), 2u);
  ::kill(ranks.back(), SIGKILL);
  // mpirun (the group's process) ends by itself, with an error, well within its 300 s bound.
  const int status = wait_exit(group.pid(), 60s);
  EXPECT_NE(status, -1) << "the group did not end within 60 s\n" << group.log();
  EXPECT_NE(status, 0) << group.log();
  EXPECT_FALSE(healthy(base)) << "rank 0 still serves without its group";
}

}  // namespace
}  // namespace moe
