// `veloxquant serve --parallel N` runs N slots on their own threads, each with its own caches,
// all calling them at once (the global pool runs one loop at a time: the other slots' loops run
// inline on their own threads). Whatever two instances of one method share — tables built on
// first use, process-wide codebooks, Highway's dispatch — must then be safe under concurrent
// use. Each servable method here runs two slots at once, with different data, before anything
// else has touched that method in this process (so state built on first use is built
// concurrently), and each slot's outputs must equal the same slot run alone afterwards, bit for
// bit. Under the tsan preset (cmake/tsan_pooled_caches.cmake builds it with the caches that
// library holds) a race is reported even when the outputs happen to agree.
#include <gtest/gtest.h>

#include <cstdio>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "support/kv_test_data.h"
#include "veloxquant/registry/method_registry.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

constexpr int64_t kHeads = 3, kQueryHeads = 9, kDim = 64;

// One slot: a serving cache of `config` fed a 200-row and a 100-row prefill chunk (blocks
// flushed on the pool, a partial block left pending) and 4 decode steps. Returns every
// output: the fused attention's where the cache has it, the fetched keys and values otherwise.
std::vector<float> run_slot(const KVCacheConfig& config, uint64_t seed) {
  auto cache = KVCacheBuilder(config).build().serving();
  const bool fused = cache->supports_fused_attention();
  std::vector<float> outputs;
  for (const int64_t n : {200, 100, 1, 1, 1, 1}) {
    const lm::Tensor k = test_support::random_kv(1, kHeads, n, kDim, seed++, lm::DType::F16);
    const lm::Tensor v = test_support::random_kv(1, kHeads, n, kDim, seed++, lm::DType::F16);
    if (fused) {
      const lm::Tensor q = test_support::random_kv(1, kQueryHeads, n, kDim, seed++, lm::DType::F32);
      lm::Tensor out({1, kQueryHeads, n, kDim}, lm::DType::F32);
      cache->fused_attention({&q, &k, &v, 0.125f, std::nullopt}, out);
      const std::vector<float> o = out.to_f32();
      outputs.insert(outputs.end(), o.begin(), o.end());
    } else {
      const lm::KeysValues kv = cache->update_and_fetch(k, v);
      for (const lm::Tensor* t : {&kv.keys, &kv.values}) {
        const std::vector<float> o = t->to_f32();
        outputs.insert(outputs.end(), o.begin(), o.end());
      }
    }
  }
  return outputs;
}

struct SlotResult {
  std::vector<float> outputs;
  std::string error;  // what the slot threw, if it did
};

SlotResult run_slot_catching(const KVCacheConfig& config, uint64_t seed) {
  SlotResult r;
  try {
    r.outputs = run_slot(config, seed);
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

TEST(ConcurrentCaches, TwoSlotsOfEveryServableMethodMatchEachRunAlone) {
  const std::vector<std::string> methods = servable_method_names();
  std::size_t checked = 0;
  for (const std::string& method : methods) {
    KVCacheConfig c;
    c.method = method;
    c.head_dim = kDim;
    SlotResult a, b;
    std::thread other([&] { b = run_slot_catching(c, 2000); });
    a = run_slot_catching(c, 1000);
    other.join();
    ASSERT_EQ(a.error, b.error) << method << ": one slot threw and the other did not";
    if (!a.error.empty()) continue;  // needs settings or a coordinator this bare shape does not give
    ++checked;
    EXPECT_EQ(a.outputs, run_slot(c, 1000)) << method << ": slot 1 with another slot beside it";
    EXPECT_EQ(b.outputs, run_slot(c, 2000)) << method << ": slot 2 with another slot beside it";
  }
  // On 2026-12-05 every servable method ran on this bare shape (40 of 40; 20 of 20 in the TSan
  // library); one that needs settings it does not give is skipped, but not most of them.
  std::printf("%zu of %zu servable methods ran two slots at once\n", checked, methods.size());
  EXPECT_GE(checked * 2, methods.size()) << "most servable methods must run on this shape";
}

}  // namespace
}  // namespace veloxquant
