// A whole benchmark run against a local streaming server: every request measured, the
// concurrency cap held, the test request's failure reported, a late server waited for.
#include <gtest/gtest.h>

#include <optional>
#include <thread>

#include "support/fake_openai_server.h"
#include "loadgen/benchmark.h"

namespace moe::loadgen {
namespace {

namespace asio = boost::asio;
using moe::testing::FakeOpenAiServer;

std::vector<SampleRequest> prompts(size_t n, bool ids, int64_t output_len) {
  RandomDatasetOptions o;
  o.num_prompts = n;
  o.input_len = 16;
  o.output_len = output_len;
  o.token_ids = ids;
  return random_dataset(o);
}

TEST(Benchmark, MeasuresEveryRequestOnBothEndpointsWithinTheConcurrencyCap) {
  for (Endpoint ep : {Endpoint::Completions, Endpoint::ChatCompletions}) {
    FakeOpenAiServer server(std::chrono::milliseconds(15));
    BenchmarkOptions o;
    o.base_url = server.url();
    o.endpoint = ep;
    o.request.model = "m";
    o.max_concurrency = 2;
    size_t last_done = 0;
    const BenchmarkRun run = run_benchmark(o, prompts(6, ep == Endpoint::Completions, 5), [&](size_t done, size_t total) {
      EXPECT_EQ(done, last_done + 1);
      EXPECT_EQ(total, 6u);
      last_done = done;
    });
    EXPECT_EQ(last_done, 6u);
    ASSERT_EQ(run.results.size(), 6u);
    for (const RequestResult& r : run.results) {
      ASSERT_TRUE(r.success) << r.error;
      EXPECT_EQ(r.output_tokens, 5);
      if (ep == Endpoint::Completions) {
        EXPECT_EQ(r.prompt_tokens, 16);  // the server's usage
      }
      EXPECT_GT(r.prompt_tokens, 0);
      // The server sleeps 15 ms before each token: lower bounds hold however busy the machine.
      EXPECT_GE(r.ttft_s, 0.015);
      EXPECT_GE(r.e2e_s, 0.075);
      ASSERT_EQ(r.itl_s.size(), 4u);
      double span = r.ttft_s;
      for (double gap : r.itl_s) span += gap;
      EXPECT_LE(span, r.e2e_s);
      EXPECT_EQ(r.generated_text, " w0 w1 w2 w3 w4");
    }
    EXPECT_LE(server.peak_streams(), 2);
    EXPECT_EQ(server.requests(), 7);  // and the test request
    const std::vector<double> ps = {99};
    const Summary s = summarize(run.results, run.duration_s, ps, Slo{});
    EXPECT_EQ(s.completed, 6);
    EXPECT_EQ(s.total_output_tokens, 30);
    EXPECT_LE(s.peak_concurrent_requests, 2);
    EXPECT_GT(s.tpot_ms.mean, 0.0);
    EXPECT_LE(s.ttft_ms.median, s.ttft_ms.percentiles[0].second);
    EXPECT_LE(s.ttft_ms.mean, s.e2el_ms.mean);
  }
}

TEST(Benchmark, AFailingTestRequestStopsTheRunWithTheServersMessage) {
  FakeOpenAiServer server;
  BenchmarkOptions o;
  o.base_url = server.url();
  o.request.model = "reject";
  try {
    run_benchmark(o, prompts(3, true, 2));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("the test request to " + server.url()), std::string::npos) << msg;
    EXPECT_NE(msg.find("HTTP 400"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model 'reject' does not exist"), std::string::npos) << msg;
  }
  EXPECT_EQ(server.requests(), 1);
}

TEST(Benchmark, ChatWithTokenIdsIsRefusedBeforeAnythingIsSent) {
  FakeOpenAiServer server;
  BenchmarkOptions o;
  o.base_url = server.url();
  o.endpoint = Endpoint::ChatCompletions;
  o.request.model = "m";
  EXPECT_THROW(run_benchmark(o, prompts(1, true, 2)), Error);
  EXPECT_EQ(server.requests(), 0);
}

TEST(Benchmark, WithoutReadyTimeoutAnAbsentServerFailsAtOnce) {
  BenchmarkOptions o;
  o.base_url = "http://127.0.0.1:" + std::to_string(FakeOpenAiServer::free_port());
  o.request.model = "m";
  try {
    run_benchmark(o, prompts(1, true, 2));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot connect to " + o.base_url), std::string::npos) << e.what();
  }
}

TEST(Benchmark, WaitsForAServerThatIsStillStarting) {
  const unsigned short port = FakeOpenAiServer::free_port();
  std::optional<FakeOpenAiServer> server;
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    server.emplace(std::chrono::milliseconds(1), port);
  });
  BenchmarkOptions o;
  o.base_url = "http://127.0.0.1:" + std::to_string(port);
  o.ready_timeout_s = 20;
  const BenchmarkRun run = run_benchmark(o, prompts(2, true, 2));
  late.join();
  for (const RequestResult& r : run.results) EXPECT_TRUE(r.success) << r.error;
  EXPECT_EQ(run.model, "fake-model");  // no model given: the server's first
}

}  // namespace
}  // namespace moe::loadgen
