// The cost policy: prefill by estimated finish time, decode by token load, and the
// skip-disaggregation decision; fed request by request with the load each one adds.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "proxy/policy/route.h"
#include "routing/pool.h"

namespace moe::routing {
namespace {

using testing::admit_decode;
using testing::admit_prefill;
using testing::instance;
using testing::pool_of;
using testing::request;

TEST(CostPrefill, PrefixGoesToItsHolderUnlessItIsOverloaded) {
  std::vector<InstanceView> pool = pool_of(InstanceRole::prefill, 3);
  for (InstanceView& v : pool) admit_prefill(v, request(1000));
  pool[1].matched_prefix_tokens = 3000;
  RoutingState state;
  Decision d = route_prefill(pool, request(4000), Policy::cost, {}, state);
  EXPECT_EQ(d.instance, 1u);
  EXPECT_EQ(d.reason, "min_cost");
  EXPECT_EQ(d.detail.rfind("p1: cost ", 0), 0u) << d.detail;

  // p1's queue now holds far more work than the 3,000 cached tokens save: the request
  // moves, although cache_aware (which counts one request in each queue) stays.
  pool[1].load.queued_prefill_tokens = 40000;
  d = route_prefill(pool, request(4000), Policy::cost, {}, state);
  EXPECT_EQ(d.instance, 0u);
  EXPECT_EQ(route_prefill(pool, request(4000), Policy::cache_aware, {}, state).instance, 1u);
}

TEST(CostPrefill, AHitIsWorthOnlyWhatItSaves) {
  std::vector<InstanceView> pool = pool_of(InstanceRole::prefill, 2);
  pool[0].load.queued_prefill_tokens = 1500;
  pool[0].load.prefill_requests = 1;
  pool[0].matched_prefix_tokens = 2000;
  // 2,000 cached tokens save more than a 1,500-token queue costs.
  RoutingState state;
  EXPECT_EQ(route_prefill(pool, request(6000), Policy::cost, {}, state).instance, 0u);
  // A queue of two such requests costs this request more time than the hit saves it, but
  // less than the hit saves in all: the compute a miss would take from later requests.
  pool[0].load.queued_prefill_tokens = 3000;
  pool[0].load.prefill_requests = 2;
  EXPECT_EQ(route_prefill(pool, request(6000), Policy::cost, {}, state).instance, 0u);
  PolicyConfig greedy;
  greedy.capacity_weight = 0;
  EXPECT_EQ(route_prefill(pool, request(6000), Policy::cost, greedy, state).instance, 1u);
  // A queue of four costs more than the hit saves even so.
  pool[0].load.queued_prefill_tokens = 6000;
  pool[0].load.prefill_requests = 4;
  EXPECT_EQ(route_prefill(pool, request(6000), Policy::cost, {}, state).instance, 1u);
}

TEST(CostPrefill, LongPromptsSpread) {
  std::vector<InstanceView> pool = pool_of(InstanceRole::prefill, 4);
  RoutingState state;
  std::vector<size_t> picks;
  for (int i = 0; i < 8; ++i) {
    const RoutingRequest r = request(8000);
    const size_t pick = *route_prefill(pool, r, Policy::cost, {}, state).instance;
    admit_prefill(pool[pick], r);
    picks.push_back(pick);
  }
  EXPECT_EQ(picks, (std::vector<size_t>{0, 1, 2, 3, 0, 1, 2, 3}));
}

TEST(CostPrefill, ShortPromptsAvoidTheQueueOfALongOne) {
  std::vector<InstanceView> pool = pool_of(InstanceRole::prefill, 2);
  admit_prefill(pool[0], request(30000));
  RoutingState state;
  for (int i = 0; i < 10; ++i) {
    const RoutingRequest r = request(500);
    const size_t pick = *route_prefill(pool, r, Policy::cost, {}, state).instance;
    EXPECT_EQ(pick, 1u);
    admit_prefill(pool[pick], r);
  }
  // least_load, counting requests, sends the next short prompt behind the long one.
  EXPECT_EQ(route_prefill(pool, request(500), Policy::least_load, {}, state).instance, 0u);
}

TEST(CostPrefill, AFasterInstanceTakesMore) {
  std::vector<InstanceView> pool = pool_of(InstanceRole::prefill, 2);
  pool[0].prefill_time.per_token_s /= 2;
  pool[0].prefill_time.per_pair_s /= 2;
  RoutingState state;
  int fast = 0;
  for (int i = 0; i < 30; ++i) {
    const RoutingRequest r = request(4000);
    const size_t pick = *route_prefill(pool, r, Policy::cost, {}, state).instance;
    fast += pick == 0;
    admit_prefill(pool[pick], r);
  }
  EXPECT_GE(fast, 19);  // about twice the slow one's 10
  EXPECT_LE(fast, 21);
}

// p0 measured prefilling at a third of the prior's speed, p1 not observed yet: a new
// deployment after its first prefills, on hardware slower than the prior's guess.
std::vector<InstanceView> one_observed_pool() {
  std::vector<InstanceView> pool = pool_of(InstanceRole::prefill, 2);
  PrefillLatencyModel measured;
  for (int64_t n : {500, 1000, 2000, 1500}) measured.observe(n, 0, 3 * PrefillTimeFit{}.seconds(n, 0));
  pool[0].prefill_time = measured.fit();
  return pool;
}

TEST(CostPrefill, AnUnobservedInstanceIsTimedByItsObservedPeersNotByThePrior) {
  std::vector<InstanceView> pool = one_observed_pool();
  EXPECT_EQ(pool[0].prefill_time.observations, 4);
  EXPECT_EQ(pool[1].prefill_time.observations, 0);
  // p1 holds twice p0's queue. Timed by the prior it would look three times as fast and
  // take the prompt anyway.
  admit_prefill(pool[0], request(1700));
  admit_prefill(pool[1], request(1700));
  admit_prefill(pool[1], request(1700));
  RoutingState state;
  EXPECT_EQ(route_prefill(pool, request(1700), Policy::cost, {}, state).instance, 0u);
  // With its queue empty p1 is the faster choice, and the decision says whose curve timed it.
  pool[1].load = {};
  const Decision to_p1 = route_prefill(pool, request(1700), Policy::cost, {}, state);
  EXPECT_EQ(to_p1.instance, 1u);
  EXPECT_NE(to_p1.detail.find("at its observed peers' speed"), std::string::npos) << to_p1.detail;
}

TEST(CostPrefill, ABurstSplitsEvenlyWhileOneInstanceIsUnobserved) {
  // Equal prompts arriving faster than they finish: with p1 timed by the prior, it took 9
  // of 12 (until its queue was three times p0's); timed as its peer, it takes half.
  std::vector<InstanceView> pool = one_observed_pool();
  RoutingState state;
  int to_p1 = 0;
  for (int i = 0; i < 12; ++i) {
    const RoutingRequest r = request(1700);
    const size_t pick = *route_prefill(pool, r, Policy::cost, {}, state).instance;
    to_p1 += pick == 1;
    admit_prefill(pool[pick], r);
  }
  EXPECT_EQ(to_p1, 6);
}

double token_load_ratio(const std::vector<InstanceView>& pool) {
  auto load = [](const InstanceView& v) { return double(v.load.kv_tokens + v.load.remaining_output_tokens); };
  const auto [lo, hi] = std::minmax_element(
      pool.begin(), pool.end(), [&](const InstanceView& a, const InstanceView& b) { return load(a) < load(b); });
  return load(*hi) / load(*lo);
}

struct Balance {
  double final_ratio = 0;  // max/min token load after the whole stream
  double worst_ratio = 0;  // the largest once every instance has had a few requests
};

// A stream of alternating long and short requests over a decode pool, nothing finishing.
Balance decode_stream(Policy policy, int instances) {
  std::vector<InstanceView> pool = pool_of(InstanceRole::decode, instances);
  RoutingState state{0, 5};
  Balance balance;
  for (int i = 0; i < 48; ++i) {
    const RoutingRequest r = i % 2 == 0 ? request(6000, 1000) : request(200, 100);
    const size_t pick = *route_decode(pool, r, policy, {}, state).instance;
    admit_decode(pool[pick], r);
    if (i >= 4 * instances) balance.worst_ratio = std::max(balance.worst_ratio, token_load_ratio(pool));
  }
  balance.final_ratio = token_load_ratio(pool);
  return balance;
}

TEST(CostDecode, TokenLoadBalancesWhereRoundRobinDoesNot) {
  const Balance two = decode_stream(Policy::cost, 2), three = decode_stream(Policy::cost, 3);
  EXPECT_LT(two.final_ratio, 1.1);
  EXPECT_LT(two.worst_ratio, 2.0);
  EXPECT_LT(three.final_ratio, 1.3);
  EXPECT_LT(three.worst_ratio, 2.0);
  // Every long request lands on d0: round robin alternates, and so do request counts.
  EXPECT_GT(decode_stream(Policy::round_robin, 2).final_ratio, 20.0);
  EXPECT_GT(decode_stream(Policy::least_load, 2).final_ratio, 20.0);
}

TEST(CostDecode, FillsInProportionToKvCapacity) {
  std::vector<InstanceView> pool = pool_of(InstanceRole::decode, 2);
  pool[0].capacity.max_kv_tokens = 400000;
  pool[1].capacity.max_kv_tokens = 200000;
  RoutingState state;
  for (int i = 0; i < 120; ++i) {
    const RoutingRequest r = i % 3 == 0 ? request(5000, 500) : request(300, 200);
    const size_t pick = *route_decode(pool, r, Policy::cost, {}, state).instance;
    admit_decode(pool[pick], r);
  }
  const double fill0 = double(pool[0].load.kv_tokens + pool[0].load.remaining_output_tokens) / 400000;
  const double fill1 = double(pool[1].load.kv_tokens + pool[1].load.remaining_output_tokens) / 200000;
  EXPECT_NEAR(fill0 / fill1, 1.0, 0.1);
}

TEST(CostDecode, SequenceLimitIsHard) {
  std::vector<InstanceView> pool = pool_of(InstanceRole::decode, 2);
  pool[0].capacity.max_sequences = 2;
  admit_decode(pool[0], request(10, 10));
  admit_decode(pool[0], request(10, 10));
  admit_decode(pool[1], request(50000, 1000));
  RoutingState state;
  const Decision d = route_decode(pool, request(100, 100), Policy::cost, {}, state);
  EXPECT_EQ(d.instance, 1u);
  EXPECT_EQ(d.reason, "min_token_load");
}

// One unified instance beside a P: what route_prefill does with a short request.
std::vector<InstanceView> mixed_pool() {
  return {instance("p0", InstanceRole::prefill), instance("u0", InstanceRole::both)};
}

TEST(SkipDisaggregation, ShortRequestRunsWholeOnAFreeUnifiedInstance) {
  std::vector<InstanceView> pool = mixed_pool();
  RoutingState state;
  Decision d = route_prefill(pool, request(200, 50), Policy::cost, {}, state);
  EXPECT_EQ(d.instance, 1u);
  EXPECT_TRUE(d.whole_request);
  EXPECT_EQ(d.reason, "skip_disaggregation");
  EXPECT_EQ(d.detail, "u0: free unified instance, 200 of 200 prompt tokens uncached <= 256");

  // A long prompt whose prefix is cached there is short where it counts.
  pool[1].matched_prefix_tokens = 7900;
  d = route_prefill(pool, request(8000, 50), Policy::cost, {}, state);
  EXPECT_TRUE(d.whole_request);
  EXPECT_EQ(d.instance, 1u);
}

TEST(SkipDisaggregation, NotForLongPromptsBusyInstancesOrOtherPolicies) {
  std::vector<InstanceView> pool = mixed_pool();
  RoutingState state;
  Decision d = route_prefill(pool, request(257), Policy::cost, {}, state);
  EXPECT_FALSE(d.whole_request);
  EXPECT_EQ(d.reason, "min_cost");

  admit_prefill(pool[1], request(100));  // something queued to prefill: not free
  d = route_prefill(pool, request(100), Policy::cost, {}, state);
  EXPECT_FALSE(d.whole_request);
  EXPECT_EQ(d.instance, 0u);

  pool = mixed_pool();
  pool[1].draining = true;
  EXPECT_FALSE(route_prefill(pool, request(100), Policy::cost, {}, state).whole_request);

  pool = mixed_pool();
  PolicyConfig off;
  off.skip_disagg_max_uncached_tokens = 0;
  EXPECT_FALSE(route_prefill(pool, request(100), Policy::cost, off, state).whole_request);
  for (Policy p : {Policy::round_robin, Policy::least_load, Policy::power_of_two, Policy::cache_aware})
    EXPECT_FALSE(route_prefill(pool, request(100), p, {}, state).whole_request) << policy_name(p);
}

TEST(SkipDisaggregation, PrefersTheFewestUncachedThenTheLightest) {
  std::vector<InstanceView> pool = pool_of(InstanceRole::both, 3);
  pool[0].matched_prefix_tokens = 100;
  pool[1].matched_prefix_tokens = 150;
  pool[2].matched_prefix_tokens = 150;
  admit_decode(pool[1], request(3000, 500));
  RoutingState state;
  EXPECT_EQ(route_prefill(pool, request(300), Policy::cost, {}, state).instance, 2u);
}

}  // namespace
}  // namespace moe::routing
