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
#include <functional>
#include <mutex>
#include <thread>
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
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& body,
                    int64_t min_chunk = 1);

  // A process-wide pool sized by set_global_threads (default: all cores).
  static ThreadPool& global();
  // Resizes the global pool (0 = all cores). Not thread-safe against concurrent parallel_for.
  static void set_global_threads(int threads);

 private:
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
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t n_ = 0;
  int participants_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;  // guarded by mutex_
};

}  // namespace base
