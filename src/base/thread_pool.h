#pragma once
// base::ThreadPool — a persistent pool for data-parallel loops. Decode steps are short (tens
// of microseconds per matrix on small models), so the pool keeps its workers alive, hands
// out one contiguous chunk per participant per call (no per-item queueing, no heap
// allocation), and both sides spin briefly on atomics before falling back to a condition
// variable: back-to-back calls then cost a cache-line hand-off instead of a futex wake-up,
// while an idle pool still sleeps.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace base {

class ThreadPool {
 public:
  // `threads` participants in total, the calling thread included (so threads - 1 workers).
  // 0 means std::thread::hardware_concurrency(). Negative values throw base::InvalidArgument.
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls body(begin, end) over disjoint chunks covering [0, n), in parallel, and returns when
  // all are done. Chunks are at least `min_chunk` items so that tiny loops stay on the caller.
  // Exceptions from the body are rethrown on the calling thread (the first one wins).
  // Calls from inside a body, or concurrent calls from other threads, run serially on the
  // caller: the pool never deadlocks on nesting.
  // The body is taken by reference (no std::function, so no heap allocation per call:
  // decode calls this a few hundred times per token); it must outlive the call, which it does
  // since the call blocks until every chunk has run.
  template <class Body>
  void parallel_for(int64_t n, Body&& body, int64_t min_chunk = 1) {
    using B = std::remove_reference_t<Body>;
    run(n,
        RangeFn{const_cast<void*>(static_cast<const void*>(std::addressof(body))),
                [](void* object, int64_t begin, int64_t end) { (*static_cast<B*>(object))(begin, end); }},
        min_chunk);
  }

  // A process-wide pool sized by set_global_threads (default: all cores).
  static ThreadPool& global();
  // The same pool, shared: a holder keeps it alive across a later set_global_threads (which then
  // only replaces what global() returns from then on).
  static std::shared_ptr<ThreadPool> global_shared();
  // Resizes the global pool (0 = all cores). Not thread-safe against concurrent parallel_for.
  static void set_global_threads(int threads);

 private:
  // A non-owning reference to the caller's body.
  struct RangeFn {
    void* object;
    void (*call)(void*, int64_t, int64_t);
    void operator()(int64_t begin, int64_t end) const { call(object, begin, end); }
  };
  void run(int64_t n, RangeFn body, int64_t min_chunk);
  void worker_loop(int index);
  void run_chunk(int participant);
  void finish_one();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::mutex call_mutex_;  // one parallel_for at a time; others run inline

  // State of the current call: written by the caller before it bumps generation_ (release),
  // read by workers after they observe the new generation (acquire). Every worker takes part
  // in every call (those beyond `participants_` just report done), so no worker can lag a
  // generation behind and run a chunk twice.
  RangeFn body_{nullptr, nullptr};
  int64_t n_ = 0;
  int participants_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;  // guarded by mutex_
};

}  // namespace base
