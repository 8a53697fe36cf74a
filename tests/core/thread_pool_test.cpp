#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <numeric>
#include <vector>

namespace moe {
namespace {

TEST(ThreadPool, RunCallsEveryThreadOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> calls(3);
  for (int round = 0; round < 1000; ++round) {
    pool.run([&](int i, int n) {
      ASSERT_EQ(n, 3);
      calls[i].fetch_add(1);
    });
  }
  for (auto& c : calls) EXPECT_EQ(c.load(), 1000);
}

TEST(ThreadPool, ParallelForCoversRangeExactlyOnce) {
  ThreadPool pool(2);
  for (int64_t n : {1, 7, 64, 1000, 4097}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, 13, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPool, SingleThreadRunsInline) {
  ThreadPool pool(1);
  int64_t sum = 0;
  pool.parallel_for(100, 10, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum, 4950);
}

TEST(ThreadPool, WorkersWakeAfterSleeping) {
  ThreadPool pool(2);
  std::atomic<int> count{0};
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    pool.run([&](int, int) { count.fetch_add(1); });
  }
  EXPECT_EQ(count.load(), 6);
}

TEST(ThreadPool, JoinRunsEachChunkOnceWhoeverTakesPart) {
  ThreadPool pool(2);
  // Every chunk is taken by whoever is inside; a worker kept busy elsewhere (here: still
  // asleep in the first round) must not hold the caller back, and no chunk runs twice.
  for (int round = 0; round < 2000; ++round) {
    std::atomic<int64_t> next{0}, sum{0};
    std::atomic<int> threads_inside{0};
    pool.join([&] {
      threads_inside.fetch_add(1);
      for (int64_t i; (i = next.fetch_add(1)) < 100;) sum.fetch_add(i);
    });
    ASSERT_EQ(sum.load(), 4950) << "round " << round;
    ASSERT_GE(threads_inside.load(), 1);
    ASSERT_LE(threads_inside.load(), 2);
  }
}

TEST(ThreadPool, RunAfterJoinsStillReachesEveryThread) {
  ThreadPool pool(3);
  std::atomic<int> total{0};
  for (int round = 0; round < 500; ++round) {
    pool.join([&] {});
    std::vector<std::atomic<int>> calls(3);
    pool.run([&](int i, int) { calls[i].fetch_add(1); });
    for (auto& c : calls) ASSERT_EQ(c.load(), 1) << "round " << round;
    total.fetch_add(1);
  }
  EXPECT_EQ(total.load(), 500);
}

TEST(ThreadPool, ParallelForChunksStartAtMultiplesOfGrain) {
  ThreadPool pool(4);
  for (int round = 0; round < 200; ++round) {
    const int64_t n = 1000 + round, grain = 16;
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::atomic<bool> aligned{true};
    pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
      if (b % grain != 0 || (e != n && e - b != grain) || e > n) aligned = false;
      for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
    });
    ASSERT_TRUE(aligned.load()) << "round " << round;
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "round " << round << " i=" << i;
  }
}

TEST(ThreadPool, ParallelForTakesOverTheShareOfAStalledThread) {
  // The worker's share is half the chunks; once the worker stalls in its first chunk the
  // caller must take the rest of that share instead of waiting for it.
  ThreadPool pool(2);
  const auto caller = std::this_thread::get_id();
  std::atomic<int> by_caller{0}, by_worker{0};
  pool.parallel_for(100, 1, [&](int64_t, int64_t) {
    if (std::this_thread::get_id() == caller) {
      by_caller.fetch_add(1);
    } else if (by_worker.fetch_add(1) == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  });
  EXPECT_EQ(by_caller.load() + by_worker.load(), 100);
  EXPECT_GE(by_caller.load(), 98);
}

}  // namespace
}  // namespace moe
