#include "core/thread_pool.h"

#include <immintrin.h>
#include <sched.h>

#include <algorithm>

#include "core/error.h"

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

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(n_threads > 0 ? n_threads : default_threads()), shares_(new Share[size_t(n_threads_)]) {
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

namespace {

uint64_t pack_range(uint64_t front, uint64_t back) { return front | back << 32; }
uint64_t front_of(uint64_t r) { return r & 0xffffffffu; }
uint64_t back_of(uint64_t r) { return r >> 32; }

}  // namespace

void ThreadPool::share_out(int64_t n_chunks) {
  if (n_chunks >= (int64_t(1) << 32)) fail("parallel_for: {} chunks, more than 2^32", n_chunks);
  const int64_t t = n_threads_;
  for (int64_t i = 0; i < t; ++i) {
    shares_[size_t(i)].range.store(pack_range(uint64_t(i * n_chunks / t), uint64_t((i + 1) * n_chunks / t)),
                                   std::memory_order_relaxed);
  }
}

int64_t ThreadPool::take_chunk(int self) {
  std::atomic<uint64_t>& own = shares_[size_t(self)].range;
  for (;;) {
    uint64_t r = own.load(std::memory_order_acquire);
    while (front_of(r) < back_of(r)) {
      if (own.compare_exchange_weak(r, pack_range(front_of(r) + 1, back_of(r)), std::memory_order_acq_rel)) {
        return int64_t(front_of(r));
      }
    }
    // Own share done: move the back half of the largest share left into it.
    int victim = -1;
    uint64_t most = 0;
    for (int i = 0; i < n_threads_; ++i) {
      const uint64_t v = shares_[size_t(i)].range.load(std::memory_order_acquire);
      if (i != self && back_of(v) > front_of(v) && back_of(v) - front_of(v) > most) {
        most = back_of(v) - front_of(v);
        victim = i;
      }
    }
    if (victim < 0) return -1;
    std::atomic<uint64_t>& theirs = shares_[size_t(victim)].range;
    uint64_t v = theirs.load(std::memory_order_acquire);
    while (front_of(v) < back_of(v)) {
      const uint64_t cut = back_of(v) - std::max<uint64_t>(1, (back_of(v) - front_of(v)) / 2);
      if (theirs.compare_exchange_weak(v, pack_range(front_of(v), cut), std::memory_order_acq_rel)) {
        // Only this thread writes its own share while it is empty.
        own.store(pack_range(cut, back_of(v)), std::memory_order_release);
        break;
      }
    }
  }
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
