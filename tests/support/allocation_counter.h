#pragma once
// An allocation counter for tests: this test tree replaces the global operator new/delete
// (allocation_counter.cpp, linked into every test executable) so a test can measure the
// bytes a piece of code really keeps allocated and compare them with what it reports
// (KVCache::nbytes() must be allocated bytes, not bit-width accounting).
//
// Usage:
//   const auto before = test_support::allocation_snapshot();
//   ... build / feed a cache, drop temporaries ...
//   const auto after = test_support::allocation_snapshot();
//   EXPECT_EQ(after.aligned_live_bytes - before.aligned_live_bytes, cache.nbytes());
//
// aligned_live_bytes counts only over-aligned allocations (operator new with align_val_t, which
// is what base::AlignedBuffer — hence every lm::Tensor — uses for its data), so bookkeeping
// allocations (shared_ptr control blocks, shape vectors) do not blur an exact comparison.
// live_bytes counts everything. Counters are process-wide atomics: keep other threads idle
// while measuring.
#include <cstdint>

namespace test_support {

struct AllocationSnapshot {
  int64_t live_bytes = 0;          // requested bytes currently allocated, all operator new forms
  int64_t aligned_live_bytes = 0;  // the same, over-aligned forms only
  int64_t allocations = 0;         // number of operator new calls so far (all forms)
};

AllocationSnapshot allocation_snapshot();

}  // namespace test_support
