// Fused decode steps of the caches whose attention paths issue 11's third speed pass rewrote
// (kvquant's word-plane keys, adakv's per-width block kernels, gear's f16 low-rank products)
// allocate nothing of their own once warm: every buffer is the driver's grow-only scratch or
// built once per cache shape. Measured against KIVI at 4 bits (planar codes, a path these
// changes do not touch): the shared per-call plumbing (request tensors, the store's views)
// allocates a fixed handful per step for every fused cache (11 when this test was written),
// which is not these sources' to remove; a source that allocated per tile or per block would
// show as more. Steps that complete no block (a flush is an encode, not an attention step).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "support/allocation_counter.h"
#include "support/kv_test_data.h"
#include "veloxquant/registry/field_assignment.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

TEST(FusedDecodeAllocations, WarmStepsAllocateNothing) {
  base::ThreadPool::set_global_threads(1);  // pool tasks are the driver's concern, not the caches'
  const int64_t heads = 3, hq = 9, d = 64;
  const std::vector<std::pair<std::string, std::vector<std::string>>> methods = {
      {"kivi", {}},  // the baseline: 4 bits
      {"kvquant", {}}, {"kvquant", {"kvquant_bits=5"}}, {"adakv", {}}, {"gear", {"gear_bits=4", "gear_rank=2"}},
      {"kivi", {}},  // 3 bits below: word-plane keys
  };
  int64_t baseline = -1;
  for (const auto& [method, fields] : methods) {
    KVCacheConfig c;
    c.method = method;
    c.head_dim = d;
    if (method == "kivi") c.bit_width_inlier = BitWidth(baseline < 0 ? 4 : 3);
    for (const std::string& f : fields) apply_field_assignment(c, f);
    auto cache = KVCacheBuilder(c).build().serving();
    uint64_t seed = 40;
    const auto step = [&](int64_t n) {
      const lm::Tensor q = test_support::random_kv(1, hq, n, d, seed++, lm::DType::F32);
      const lm::Tensor k = test_support::random_kv(1, heads, n, d, seed++, lm::DType::F16);
      const lm::Tensor v = test_support::random_kv(1, heads, n, d, seed++, lm::DType::F16);
      lm::Tensor out({1, hq, n, d}, lm::DType::F32);
      const auto before = test_support::allocation_snapshot();
      cache->fused_attention({&q, &k, &v, 0.125f, std::nullopt}, out);
      return test_support::allocation_snapshot().allocations - before.allocations;
    };
    step(300);  // prefill: blocks flushed, scratch grown
    step(1);    // first decode step: per-shape layouts built
    if (baseline < 0) {
      baseline = step(1);
      continue;
    }
    for (int i = 0; i < 3; ++i) EXPECT_EQ(step(1), baseline) << method << " step " << i;
  }
  base::ThreadPool::set_global_threads(0);
}

}  // namespace
}  // namespace veloxquant
