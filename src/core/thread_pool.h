#pragma once
// A fixed pool of compute threads for the kernels. The calling thread takes part as
// thread 0, workers spin briefly between jobs (a decode step issues hundreds of short
// jobs, so waking sleeping threads each time would cost more than the work) and then
// sleep on a futex.
//
// Most jobs are joinable: the work is a shared pile that whoever arrives takes from, and
// the caller does not wait for a worker that has not arrived by the time the pile is empty.
// When the machine has more runnable threads than cores (a server's I/O thread, a client
// on the same host), a worker is often off its core for a whole scheduler time slice; a
// job that had to wait for every worker would then take a time slice instead of
// microseconds, hundreds of times per decode step.
#include <atomic>
#include <cstdint>
#include <memory>
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
  // For work split by thread index; prefer join() or parallel_for().
  template <typename Fn>
  void run(Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    dispatch(
        [](void* ctx, int i, int n) { (*static_cast<F*>(ctx))(i, n); },
        const_cast<void*>(static_cast<const void*>(&fn)), true);
  }

  // Runs fn() on the calling thread and on each worker that arrives while the caller is
  // still inside fn; returns when every thread that entered fn has left it. fn must take
  // its work from a shared counter until none is left, so any number of threads (one
  // included) completes it.
  template <typename Fn>
  void join(Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    dispatch(
        [](void* ctx, int, int) { (*static_cast<F*>(ctx))(); },
        const_cast<void*>(static_cast<const void*>(&fn)), false);
  }

  // Splits [0, n) into chunks of `grain` items (the last may be shorter) and calls
  // fn(begin, end) once per chunk, in no particular order: fn must not wait on another
  // chunk. Each thread starts on its own contiguous share of the chunks and takes them in
  // order, so it streams one long run of memory (jumping between scattered chunks costs
  // the hardware prefetchers their stream each time: 5-30% of a weight-streaming GEMV on
  // two cores); a thread whose share is done takes the back half of the largest share
  // left, so a thread that never arrives or stalls holds nobody back.
  template <typename Fn>
  void parallel_for(int64_t n, int64_t grain, Fn&& fn) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (n_threads_ == 1 || n <= grain) {
      fn(int64_t(0), n);
      return;
    }
    share_out((n + grain - 1) / grain);
    auto body = [&](int self) {
      for (int64_t c; (c = take_chunk(self)) >= 0;) fn(c * grain, c * grain + grain < n ? c * grain + grain : n);
    };
    using F = decltype(body);
    dispatch([](void* ctx, int i, int) { (*static_cast<F*>(ctx))(i); }, &body, false);
  }

  static int default_threads();

  // Spins, then yields, until done() holds: for a thread inside a job that waits on work
  // another thread of the job has taken (that thread may be off its core for a while).
  template <typename Pred>
  static void wait_until(Pred&& done) {
    for (int spin = 0; !done(); ++spin) {
      if (spin < kSpinIterations) {
        __builtin_ia32_pause();
      } else {
        std::this_thread::yield();
      }
    }
  }

 private:
  // Polling before a waiting thread yields or sleeps: 50-100 us where a pause is short,
  // about 400 us on Zen 5 (measured), still shorter than a time slice.
  static constexpr int kSpinIterations = 20000;

  using Job = void (*)(void*, int, int);
  // every_thread: run()'s contract (each worker runs the job), else join()'s.
  void dispatch(Job job, void* ctx, bool every_thread);
  void worker(int index);
  // parallel_for's shares: thread i's slot holds its chunks [front, back) packed into one
  // word (front in the low half), so an owner taking from the front and a thief taking
  // from the back agree through one compare-and-swap.
  void share_out(int64_t n_chunks);
  int64_t take_chunk(int self);  // the next chunk for thread self, -1 when none is left
  struct alignas(64) Share {
    std::atomic<uint64_t> range{0};
  };

  int n_threads_;
  std::unique_ptr<Share[]> shares_;
  std::vector<std::thread> threads_;
  // The job, valid while open_ holds its generation; a worker reads it only after it has
  // counted itself in joined_ and seen its generation open, so the caller cannot have
  // moved on to another job in between.
  Job job_ = nullptr;
  void* ctx_ = nullptr;
  bool every_thread_ = false;
  std::atomic<uint32_t> generation_{0};  // bumped to announce each job; wakes workers
  std::atomic<uint32_t> open_{0};        // generation of the job still taking workers; 0: none
  std::atomic<int> joined_{0};           // workers inside (or checking) the open job
  std::atomic<int> pending_{0};          // run(): workers yet to finish
  std::atomic<bool> stop_{false};
};

}  // namespace moe
