// Statistics of a serving benchmark against numbers worked out by hand.
#include <gtest/gtest.h>

#include "core/error.h"
#include "loadgen/stats.h"

namespace moe::loadgen {
namespace {

TEST(Percentile, InterpolatesBetweenNearestRanks) {
  const std::vector<double> v = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);    // rank 1.5
  EXPECT_DOUBLE_EQ(percentile(v, 99), 3.97);   // rank 2.97
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4.0);
  EXPECT_DOUBLE_EQ(percentile(std::vector<double>{7}, 90), 7.0);
  EXPECT_DOUBLE_EQ(percentile(std::vector<double>{}, 50), 0.0);
}

TEST(Describe, MeanMedianPopulationStddevAndPercentiles) {
  const std::vector<double> ps = {90, 99.9};
  const Distribution d = describe({4, 1, 3, 2}, ps);
  EXPECT_EQ(d.count, 4u);
  EXPECT_DOUBLE_EQ(d.mean, 2.5);
  EXPECT_DOUBLE_EQ(d.median, 2.5);
  EXPECT_NEAR(d.stddev, 1.118033988749895, 1e-12);  // sqrt(5/4)
  ASSERT_EQ(d.percentiles.size(), 2u);
  EXPECT_DOUBLE_EQ(d.percentiles[0].second, 3.7);    // rank 2.7
  EXPECT_NEAR(d.percentiles[1].second, 3.997, 1e-12);  // rank 2.997
  const Distribution empty = describe({}, ps);
  EXPECT_EQ(empty.count, 0u);
  EXPECT_EQ(empty.mean, 0.0);
  EXPECT_EQ(empty.percentiles[0].second, 0.0);
}

TEST(Tpot, ExcludesTheFirstToken) {
  RequestResult r;
  r.ttft_s = 0.5;
  r.e2e_s = 2.5;
  r.output_tokens = 11;
  EXPECT_DOUBLE_EQ(time_per_output_token_s(r), 0.2);
  r.output_tokens = 1;
  EXPECT_DOUBLE_EQ(time_per_output_token_s(r), 0.0);
}

// A: 11 tokens, TTFT 0.5 s, E2E 2.5 s, a chunk every 0.2 s. B: one token at 0.3 s.
// C: failed. 10 s in all.
std::vector<RequestResult> three_requests() {
  RequestResult a;
  a.success = true;
  a.prompt_tokens = 100;
  a.output_tokens = 11;
  a.start_s = 0;
  a.ttft_s = 0.5;
  a.e2e_s = 2.5;
  a.itl_s.assign(10, 0.2);
  RequestResult b;
  b.success = true;
  b.prompt_tokens = 50;
  b.output_tokens = 1;
  b.start_s = 1;
  b.ttft_s = 0.3;
  b.e2e_s = 0.3;
  RequestResult c;
  c.error = "HTTP 500";
  c.start_s = 2;
  c.e2e_s = 1;
  return {a, b, c};
}

TEST(Summarize, CountsThroughputsAndLatencies) {
  const std::vector<double> ps = {99};
  const Summary s = summarize(three_requests(), 10.0, ps, Slo{});
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.total_input_tokens, 150);
  EXPECT_EQ(s.total_output_tokens, 12);
  EXPECT_DOUBLE_EQ(s.request_throughput, 0.2);
  EXPECT_DOUBLE_EQ(s.output_throughput, 1.2);
  EXPECT_DOUBLE_EQ(s.total_token_throughput, 16.2);
  EXPECT_FALSE(s.good_requests.has_value());

  EXPECT_DOUBLE_EQ(s.ttft_ms.mean, 400);
  EXPECT_DOUBLE_EQ(s.ttft_ms.median, 400);
  EXPECT_DOUBLE_EQ(s.ttft_ms.percentiles[0].second, 498);  // 300 + 200 * 0.99
  EXPECT_EQ(s.tpot_ms.count, 1u);  // B has a single token: no TPOT
  EXPECT_NEAR(s.tpot_ms.mean, 200, 1e-9);
  EXPECT_EQ(s.itl_ms.count, 10u);
  EXPECT_NEAR(s.itl_ms.mean, 200, 1e-9);
  EXPECT_NEAR(s.itl_ms.stddev, 0, 1e-9);
  EXPECT_DOUBLE_EQ(s.e2el_ms.mean, 1400);

  // A [0, 2.5] overlaps B [1, 1.3] and C [2, 3], which do not overlap each other.
  EXPECT_EQ(s.peak_concurrent_requests, 2);
  // A's chunks at 0.5, 0.7, ..., 2.5 put 5 into second 1, and B's one chunk at 1.3 a 6th.
  EXPECT_DOUBLE_EQ(s.peak_output_throughput, 6);
}

TEST(Summarize, GoodputCountsCompletedRequestsMeetingEveryObjective) {
  const auto results = three_requests();
  const std::vector<double> ps;
  const Summary ttft = summarize(results, 10.0, ps, parse_slo({"ttft:400"}));
  ASSERT_TRUE(ttft.good_requests.has_value());
  EXPECT_EQ(*ttft.good_requests, 1);  // B only
  EXPECT_DOUBLE_EQ(ttft.request_goodput, 0.1);
  EXPECT_DOUBLE_EQ(ttft.goodput_fraction, 1.0 / 3.0);  // over every request sent

  EXPECT_EQ(*summarize(results, 10.0, ps, parse_slo({"tpot:250"})).good_requests, 2);
  EXPECT_EQ(*summarize(results, 10.0, ps, parse_slo({"tpot:150"})).good_requests, 1);  // B's TPOT counts as 0
  EXPECT_EQ(*summarize(results, 10.0, ps, parse_slo({"e2el:2000"})).good_requests, 1);
  EXPECT_EQ(*summarize(results, 10.0, ps, parse_slo({"ttft:600", "tpot:250", "e2el:3000"})).good_requests, 2);
  EXPECT_EQ(*summarize(results, 10.0, ps, parse_slo({"ttft:600", "e2e:1000"})).good_requests, 1);
}

TEST(ParseSlo, ReadsNamesAndMilliseconds) {
  const Slo slo = parse_slo({"ttft:300", "tpot:12.5", "e2el:2000"});
  EXPECT_EQ(slo.ttft_ms, 300.0);
  EXPECT_EQ(slo.tpot_ms, 12.5);
  EXPECT_EQ(slo.e2el_ms, 2000.0);
  EXPECT_TRUE(parse_slo({}).empty());
}

TEST(ParseSlo, RejectsBadItemsWithTheirText) {
  for (const char* bad : {"ttft", "ttft:", "ttft:abc", "ttft:-1", "ttft:0", "ttft:10ms", "itl:5"}) {
    try {
      parse_slo({bad});
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

TEST(Summarize, NoCompletedRequestsGivesZeros) {
  RequestResult failed;
  failed.error = "x";
  const std::vector<RequestResult> results = {failed};
  const std::vector<double> ps = {99};
  const Summary s = summarize(results, 1.0, ps, Slo{});
  EXPECT_EQ(s.completed, 0);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.output_throughput, 0.0);
  EXPECT_EQ(s.ttft_ms.mean, 0.0);
  EXPECT_EQ(s.ttft_ms.percentiles[0].second, 0.0);
}

}  // namespace
}  // namespace moe::loadgen
