// The policy registry, eligibility, and the peers' policies (round_robin, least_load,
// power_of_two, cache_aware): deterministic choices on fixed pools.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "proxy/policy/route.h"
#include "routing/pool.h"

namespace moe::routing {
namespace {

using testing::instance;
using testing::pool_of;
using testing::request;

constexpr Policy kAllPolicies[] = {Policy::round_robin, Policy::least_load, Policy::power_of_two, Policy::cache_aware,
                                   Policy::cost};

std::vector<InstanceView> prefill_pool(int n) { return pool_of(InstanceRole::prefill, n); }

TEST(PolicyNames, RoundTripAndRejectUnknown) {
  for (Policy p : kAllPolicies) EXPECT_EQ(parse_policy_name(policy_name(p)), p);
  EXPECT_EQ(parse_policy_name("cost"), Policy::cost);
  try {
    parse_policy_name("random");
    FAIL() << "no error for an unknown policy";
  } catch (const Error& e) {
    EXPECT_STREQ(
        e.what(),
        "unknown routing policy 'random' (expected round_robin, least_load, power_of_two, cache_aware or cost)");
  }
}

// Five prefill instances of which only p4 may take a 200-token prompt.
std::vector<InstanceView> one_eligible_pool() {
  std::vector<InstanceView> pool = prefill_pool(5);
  pool[0].healthy = false;
  pool[1].draining = true;
  pool[2].capacity.max_sequences = 4;
  pool[2].load.waiting_requests = 2;
  pool[2].load.running_sequences = 2;
  pool[3].capacity.max_kv_tokens = 1000;
  pool[3].load.kv_tokens = 900;
  // p4 is the most loaded by every measure, so only eligibility can explain choosing it.
  pool[4].load = {50000, 40, 30, 10, 100000, 0};
  return pool;
}

TEST(Eligibility, EveryPolicySkipsUnhealthyDrainingAndFullInstances) {
  const std::vector<InstanceView> pool = one_eligible_pool();
  for (Policy p : kAllPolicies) {
    RoutingState state{0, 7};
    for (int i = 0; i < 8; ++i) {
      const Decision d = route_prefill(pool, request(200), p, PolicyConfig{}, state);
      ASSERT_TRUE(d.instance) << policy_name(p);
      EXPECT_EQ(*d.instance, 4u) << policy_name(p) << ": " << d.detail;
    }
  }
}

TEST(Eligibility, KvRoomCountsOnlyWhatThePrefillAdds) {
  std::vector<InstanceView> pool = prefill_pool(1);
  pool[0].capacity.max_kv_tokens = 1000;
  pool[0].load.kv_tokens = 900;
  pool[0].matched_prefix_tokens = 150;  // 200-token prompt: 50 new tokens fit
  RoutingState state;
  EXPECT_TRUE(route_prefill(pool, request(200), Policy::cost, PolicyConfig{}, state).instance);
  pool[0].matched_prefix_tokens = 0;
  EXPECT_FALSE(route_prefill(pool, request(200), Policy::cost, PolicyConfig{}, state).instance);
}

TEST(Eligibility, NoEligibleInstanceSaysWhy) {
  std::vector<InstanceView> pool = one_eligible_pool();
  pool[4].weight = 0;
  pool.push_back(instance("d0", InstanceRole::decode));
  for (Policy p : kAllPolicies) {
    RoutingState state;
    const Decision d = route_prefill(pool, request(200), p, PolicyConfig{}, state);
    EXPECT_FALSE(d.instance) << policy_name(p);
    EXPECT_FALSE(d.whole_request);
    EXPECT_EQ(d.reason, "no_eligible_instance");
    EXPECT_EQ(d.detail,
              "no prefill instance can take the request (of 6: 1 of another role, 1 unhealthy, 1 draining, 1 with "
              "weight 0, 2 full)");
  }
}

TEST(Eligibility, RolesServeTheirStageAndUnifiedServesBoth) {
  std::vector<InstanceView> pool{instance("p0", InstanceRole::prefill), instance("d0", InstanceRole::decode)};
  RoutingState state;
  for (Policy p : kAllPolicies) {
    EXPECT_EQ(route_prefill(pool, request(5000), p, PolicyConfig{}, state).instance, 0u) << policy_name(p);
    EXPECT_EQ(route_decode(pool, request(5000), p, PolicyConfig{}, state).instance, 1u) << policy_name(p);
  }
  pool[0].healthy = pool[1].healthy = false;
  pool.push_back(instance("u0", InstanceRole::both));
  for (Policy p : kAllPolicies) {
    EXPECT_EQ(route_prefill(pool, request(5000), p, PolicyConfig{}, state).instance, 2u) << policy_name(p);
    EXPECT_EQ(route_decode(pool, request(5000), p, PolicyConfig{}, state).instance, 2u) << policy_name(p);
  }
}

TEST(RoundRobin, TakesTheEligibleInTurn) {
  std::vector<InstanceView> pool = prefill_pool(3);
  RoutingState state;
  std::vector<size_t> picks;
  for (int i = 0; i < 6; ++i)
    picks.push_back(*route_prefill(pool, request(100), Policy::round_robin, {}, state).instance);
  EXPECT_EQ(picks, (std::vector<size_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(state.turn, 6u);

  pool[1].healthy = false;
  picks.clear();
  for (int i = 0; i < 4; ++i)
    picks.push_back(*route_prefill(pool, request(100), Policy::round_robin, {}, state).instance);
  EXPECT_EQ(picks, (std::vector<size_t>{0, 2, 0, 2}));
}

TEST(LeastLoad, FewestRequestsPerWeight) {
  std::vector<InstanceView> pool = prefill_pool(3);
  pool[0].load.running_sequences = 4;
  pool[1].load.running_sequences = 3;
  pool[2].load.running_sequences = 5;
  RoutingState state;
  EXPECT_EQ(route_prefill(pool, request(100), Policy::least_load, {}, state).instance, 1u);
  pool[2].weight = 2;  // 5 / 2 < 3
  EXPECT_EQ(route_prefill(pool, request(100), Policy::least_load, {}, state).instance, 2u);
  // Tokens do not count: one 30,000-token prompt is one request.
  pool[2].load.queued_prefill_tokens = 30000;
  EXPECT_EQ(route_prefill(pool, request(100), Policy::least_load, {}, state).instance, 2u);
}

TEST(LeastLoad, TheProxysPrefillsInFlightCountBeforeTheInstanceReportsThem) {
  std::vector<InstanceView> pool = prefill_pool(2);
  pool[0].load.prefill_requests = 1;  // routed there a moment ago; its report still says idle
  RoutingState state;
  EXPECT_EQ(route_prefill(pool, request(100), Policy::least_load, {}, state).instance, 1u);
  EXPECT_EQ(route_prefill(pool, request(100), Policy::cache_aware, {}, state).instance, 1u);
  // Once reported, the same requests are not counted twice.
  pool[0].load.running_sequences = 1;
  pool[1].load.running_sequences = 1;
  EXPECT_EQ(route_prefill(pool, request(100), Policy::least_load, {}, state).instance, 0u);
}

std::vector<size_t> power_of_two_picks(const std::vector<InstanceView>& pool, uint64_t seed, int n) {
  RoutingState state{0, seed};
  std::vector<size_t> picks;
  for (int i = 0; i < n; ++i)
    picks.push_back(*route_decode(pool, request(100), Policy::power_of_two, {}, state).instance);
  return picks;
}

TEST(PowerOfTwo, DeterministicForASeed) {
  const std::vector<InstanceView> pool = pool_of(InstanceRole::decode, 4);
  EXPECT_EQ(power_of_two_picks(pool, 42, 64), power_of_two_picks(pool, 42, 64));
  EXPECT_NE(power_of_two_picks(pool, 42, 64), power_of_two_picks(pool, 43, 64));
  // Equal loads: ties go to the first drawn, which is uniform; everyone gets picked.
  const std::vector<size_t> picks = power_of_two_picks(pool, 42, 200);
  for (size_t i = 0; i < pool.size(); ++i) EXPECT_GT(std::count(picks.begin(), picks.end(), i), 20) << "d" << i;
}

TEST(PowerOfTwo, TheLessLoadedOfTwoDistinctDraws) {
  std::vector<InstanceView> pool = pool_of(InstanceRole::decode, 4);
  for (int i = 0; i < 4; ++i) pool[i].load.running_sequences = 10 * (i + 1);
  const std::vector<size_t> picks = power_of_two_picks(pool, 1, 200);
  // Two distinct draws: the most loaded always loses, the least loaded wins whenever drawn
  // (half the time).
  EXPECT_EQ(std::count(picks.begin(), picks.end(), 3u), 0);
  EXPECT_GT(std::count(picks.begin(), picks.end(), 0u), 70);
  pool.resize(2);
  for (size_t pick : power_of_two_picks(pool, 1, 20)) EXPECT_EQ(pick, 0u);
}

// Three prefill instances, the prompt's 4,000-token prefix on p1, equal loads.
std::vector<InstanceView> prefix_pool() {
  std::vector<InstanceView> pool = prefill_pool(3);
  for (InstanceView& v : pool) v.load.running_sequences = 10;
  pool[1].matched_prefix_tokens = 4000;
  return pool;
}

TEST(CacheAware, BalancedPoolGoesToThePrefix) {
  std::vector<InstanceView> pool = prefix_pool();
  RoutingState state;
  Decision d = route_prefill(pool, request(5000), Policy::cache_aware, {}, state);
  EXPECT_EQ(d.instance, 1u);
  EXPECT_EQ(d.reason, "prefix_match");
  EXPECT_EQ(d.detail, "p1: 4000 of 5000 prompt tokens cached (ratio 0.80 >= 0.3)");
  // Within both thresholds (difference 60 <= 64) the prefix still wins.
  pool[1].load.running_sequences = 70;
  EXPECT_EQ(route_prefill(pool, request(5000), Policy::cache_aware, {}, state).instance, 1u);
}

TEST(CacheAware, LowMatchGoesToTheLeastLoaded) {
  std::vector<InstanceView> pool = prefix_pool();
  pool[2].load.running_sequences = 9;
  RoutingState state;
  const Decision d = route_prefill(pool, request(20000), Policy::cache_aware, {}, state);  // 0.2 < 0.3
  EXPECT_EQ(d.instance, 2u);
  EXPECT_EQ(d.reason, "low_match");
}

TEST(CacheAware, ImbalancedPoolGoesToTheLeastLoaded) {
  std::vector<InstanceView> pool = prefix_pool();
  pool[1].load.running_sequences = 80;  // 80 - 10 > 64 and 80 > 1.5 * 10
  RoutingState state;
  const Decision d = route_prefill(pool, request(5000), Policy::cache_aware, {}, state);
  EXPECT_EQ(d.instance, 0u);
  EXPECT_EQ(d.reason, "imbalanced");
  // Both thresholds must be crossed: a large relative gap over few requests is balanced.
  pool = prefix_pool();
  for (InstanceView& v : pool) v.load.running_sequences = 1;
  pool[1].load.running_sequences = 20;
  EXPECT_EQ(route_prefill(pool, request(5000), Policy::cache_aware, {}, state).reason, "prefix_match");
}

TEST(CacheAware, TiesOnTheMatchGoToTheLessLoaded) {
  std::vector<InstanceView> pool = prefix_pool();
  pool[2].matched_prefix_tokens = 4000;
  pool[2].load.running_sequences = 8;
  RoutingState state;
  EXPECT_EQ(route_prefill(pool, request(5000), Policy::cache_aware, {}, state).instance, 2u);
}

}  // namespace
}  // namespace moe::routing
