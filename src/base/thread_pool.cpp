#include "base/thread_pool.h"

#include <algorithm>
#include <memory>
#include <string>

#include "base/error.h"

namespace base {

namespace {
thread_local bool t_inside_pool_body = false;

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
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::run_chunk(int participant) {
  // Static partition: participant p takes the p-th of `participants_` near-equal chunks.
  const int64_t begin = n_ * participant / participants_;
  const int64_t end = n_ * (participant + 1) / participants_;
  if (begin >= end) return;
  t_inside_pool_body = true;
  try {
    (*body_)(begin, end);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = std::current_exception();
  }
  t_inside_pool_body = false;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= participants_) continue;  // not needed for this call
    }
    run_chunk(index);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& body,
                              int64_t min_chunk) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  const int64_t useful = std::min<int64_t>(size(), (n + min_chunk - 1) / min_chunk);
  std::unique_lock<std::mutex> call_lock(call_mutex_, std::defer_lock);
  if (useful <= 1 || t_inside_pool_body || !call_lock.try_lock()) {
    body(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    body_ = &body;
    n_ = n;
    participants_ = static_cast<int>(useful);
    pending_ = participants_ - 1;
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  run_chunk(0);
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    body_ = nullptr;
    error = error_;
    error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

namespace {
std::mutex g_global_mutex;
std::unique_ptr<ThreadPool> g_global_pool;
}  // namespace

ThreadPool& ThreadPool::global() {
  std::lock_guard<std::mutex> lock(g_global_mutex);
  if (!g_global_pool) g_global_pool = std::make_unique<ThreadPool>(0);
  return *g_global_pool;
}

void ThreadPool::set_global_threads(int threads) {
  auto pool = std::make_unique<ThreadPool>(threads);
  std::lock_guard<std::mutex> lock(g_global_mutex);
  g_global_pool = std::move(pool);
}

}  // namespace base
