#include "core/thread_pool.h"

#include <immintrin.h>
#include <sched.h>

namespace moe {

int ThreadPool::default_threads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? int(n) : 1;
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads > 0 ? n_threads : default_threads()) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::dispatch(Job job, void* ctx, bool every_thread) {
  if (n_threads_ == 1) {
    job(ctx, 0, 1);
    return;
  }
  job_ = job;
  ctx_ = ctx;
  every_thread_ = every_thread;
  pending_.store(every_thread ? n_threads_ - 1 : 0);
  uint32_t gen = generation_.load() + 1;
  if (gen == 0) gen = 1;  // open_ uses 0 for "no job"
  open_.store(gen);
  generation_.store(gen);
  generation_.notify_all();
  job(ctx, 0, n_threads_);
  if (every_thread) wait_until([&] { return pending_.load() == 0; });
  // Workers that come later find the job closed and never touch it.
  open_.store(0);
  wait_until([&] { return joined_.load() == 0; });
}

void ThreadPool::worker(int index) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      _mm_pause();
      gen = generation_.load(std::memory_order_acquire);
    }
    while (gen == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    joined_.fetch_add(1);
    if (open_.load() == gen) {
      job_(ctx_, index, n_threads_);
      if (every_thread_) pending_.fetch_sub(1);
    }
    joined_.fetch_sub(1);
  }
}

}  // namespace moe
