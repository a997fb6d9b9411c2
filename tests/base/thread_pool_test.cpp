// base::ThreadPool under load: back-to-back calls (the spin-then-wait hand-off between the
// caller and the workers), calls spaced so the workers fall asleep on the condition variable,
// exceptions, nesting and concurrent callers. Built with ThreadSanitizer
// (scripts/test.sh --sanitize thread) this is the pool's race check.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"

namespace base {
namespace {

TEST(ThreadPool, BackToBackCallsEachCoverEveryItemOnce) {
  ThreadPool pool(4);
  std::vector<int> hits(1000, 0);
  // Plain (non-atomic) writes to disjoint items: the pool's hand-off must order each call's
  // writes before the next call's, or TSan reports a race.
  for (int call = 0; call < 2000; ++call) {
    pool.parallel_for(static_cast<int64_t>(hits.size()), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) ++hits[static_cast<std::size_t>(i)];
    });
  }
  for (int h : hits) ASSERT_EQ(h, 2000);
}

TEST(ThreadPool, CallsAfterTheWorkersSleptStillRunEverywhere) {
  ThreadPool pool(3);
  std::vector<int64_t> sums(3, 0);
  for (int call = 0; call < 5; ++call) {
    // Longer than the spin budget (50 us): the workers are on the condition variable.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::vector<int64_t> items(300, 0);
    pool.parallel_for(300, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) items[static_cast<std::size_t>(i)] = i;
    });
    EXPECT_EQ(std::accumulate(items.begin(), items.end(), int64_t{0}), 299 * 300 / 2);
  }
}

TEST(ThreadPool, TheFirstExceptionReachesTheCallerAndThePoolStaysUsable) {
  ThreadPool pool(4);
  EXPECT_THROW(pool.parallel_for(100,
                                 [](int64_t begin, int64_t) {
                                   if (begin > 0) throw std::runtime_error("chunk failed");
                                 }),
               std::runtime_error);
  std::atomic<int64_t> count{0};
  pool.parallel_for(100, [&](int64_t begin, int64_t end) { count += end - begin; });
  EXPECT_EQ(count.load(), 100);
}

TEST(ThreadPool, NestedAndConcurrentCallsRunInlineWithoutDeadlock) {
  ThreadPool pool(4);
  std::atomic<int64_t> inner{0};
  pool.parallel_for(8, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      pool.parallel_for(10, [&](int64_t b, int64_t e) { inner += e - b; });
    }
  });
  EXPECT_EQ(inner.load(), 80);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  callers.reserve(3);
  for (int t = 0; t < 3; ++t) {
    callers.emplace_back([&] {
      for (int call = 0; call < 200; ++call) {
        pool.parallel_for(64, [&](int64_t b, int64_t e) { total += e - b; });
      }
    });
  }
  for (std::thread& c : callers) c.join();
  EXPECT_EQ(total.load(), 3 * 200 * 64);
}

TEST(ThreadPool, ANegativeThreadCountIsRefused) { EXPECT_THROW(ThreadPool(-1), InvalidArgument); }

}  // namespace
}  // namespace base
