#include "base/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>

#include "base/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace base {

namespace {
thread_local bool t_inside_pool_body = false;

// How long a thread spins on an atomic before sleeping on the condition variable: long
// enough to bridge the gap between the matmuls of one decode step, short enough that an
// idle pool (or an oversubscribed machine) does not burn a core.
constexpr auto kSpinFor = std::chrono::microseconds(50);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Spins until pred() holds or the spin budget is spent; returns pred().
template <class Pred>
bool spin_until(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinFor;
  for (int i = 1;; ++i) {
    if (pred()) return true;
    cpu_relax();
    if (i % 64 == 0) {
      if (std::chrono::steady_clock::now() > deadline) return pred();
      std::this_thread::yield();  // let a preempted peer run on a busy machine
    }
  }
}

int resolve_thread_count(int threads) {
  if (threads < 0) {
    throw InvalidArgument("thread count must be >= 0 (0 = all cores), got " + std::to_string(threads));
  }
  if (threads == 0) {
    const unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 1 : static_cast<int>(hw);
  }
  return threads;
}
}  // namespace

ThreadPool::ThreadPool(int threads) {
  const int total = resolve_thread_count(threads);
  workers_.reserve(static_cast<std::size_t>(total - 1));
  for (int i = 1; i < total; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::run_chunk(int participant) {
  if (participant >= participants_) return;
  // Static partition: participant p takes the p-th of `participants_` near-equal chunks.
  const int64_t begin = n_ * participant / participants_;
  const int64_t end = n_ * (participant + 1) / participants_;
  if (begin >= end) return;
  t_inside_pool_body = true;
  try {
    body_(begin, end);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = std::current_exception();
  }
  t_inside_pool_body = false;
}

void ThreadPool::finish_one() {
  if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    // Taking the mutex orders this notify after the caller's predicate check, so the wake-up
    // cannot be lost.
    std::lock_guard<std::mutex> lock(mutex_);
    done_.notify_one();
  }
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const auto ready = [&] {
      return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
    };
    if (!spin_until(ready)) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, ready);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    run_chunk(index);
    finish_one();
  }
}

void ThreadPool::run(int64_t n, RangeFn body, int64_t min_chunk) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  const int64_t useful = std::min<int64_t>(size(), (n + min_chunk - 1) / min_chunk);
  std::unique_lock<std::mutex> call_lock(call_mutex_, std::defer_lock);
  if (useful <= 1 || t_inside_pool_body || !call_lock.try_lock()) {
    body(0, n);
    return;
  }
  body_ = body;
  n_ = n;
  participants_ = static_cast<int>(useful);
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    // Under the mutex so a worker between its predicate check and its wait cannot miss it.
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = nullptr;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  run_chunk(0);
  const auto all_done = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  std::exception_ptr error;
  if (!spin_until(all_done)) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, all_done);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error = error_;
    error_ = nullptr;
  }
  body_ = RangeFn{nullptr, nullptr};
  if (error) std::rethrow_exception(error);
}

namespace {
std::mutex g_global_mutex;
std::shared_ptr<ThreadPool> g_global_pool;
}  // namespace

ThreadPool& ThreadPool::global() { return *global_shared(); }

std::shared_ptr<ThreadPool> ThreadPool::global_shared() {
  std::lock_guard<std::mutex> lock(g_global_mutex);
  if (!g_global_pool) g_global_pool = std::make_shared<ThreadPool>(0);
  return g_global_pool;
}

void ThreadPool::set_global_threads(int threads) {
  auto pool = std::make_shared<ThreadPool>(threads);
  std::lock_guard<std::mutex> lock(g_global_mutex);
  g_global_pool = std::move(pool);
}

}  // namespace base
