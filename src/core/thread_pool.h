#pragma once
// A fixed pool of compute threads for the kernels. The calling thread takes part as
// thread 0, workers spin briefly between jobs (a decode step issues hundreds of short
// jobs, so waking sleeping threads each time would cost more than the work) and then
// sleep on a futex.
#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

namespace moe {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads <= 0: one per core
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(thread_index, n_threads) once on every thread and returns when all are done.
  template <typename Fn>
  void run(Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    dispatch(
        [](void* ctx, int i, int n) { (*static_cast<F*>(ctx))(i, n); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

  // Splits [0, n) into chunks of `grain` items handed out dynamically; fn(begin, end).
  template <typename Fn>
  void parallel_for(int64_t n, int64_t grain, Fn&& fn) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (n_threads_ == 1 || n <= grain) {
      fn(int64_t(0), n);
      return;
    }
    std::atomic<int64_t> next{0};
    run([&](int, int) {
      for (;;) {
        const int64_t begin = next.fetch_add(grain, std::memory_order_relaxed);
        if (begin >= n) break;
        fn(begin, begin + grain < n ? begin + grain : n);
      }
    });
  }

  static int default_threads();

 private:
  using Job = void (*)(void*, int, int);
  void dispatch(Job job, void* ctx);
  void worker(int index);

  int n_threads_;
  std::vector<std::thread> threads_;
  Job job_ = nullptr;
  void* ctx_ = nullptr;
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace moe
