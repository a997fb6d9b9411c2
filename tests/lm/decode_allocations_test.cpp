// Heap allocations of one decode step after warm-up. The forward pass's working buffers are
// reused (they only grow), so what remains per step is the cache contract's own objects:
// per layer the [1, H, 1, D] query / key / value tensors handed to the cache, the attention
// output, and the views update_and_fetch returns — a fixed count per layer that does not grow
// with the context. The test pins that count so a regression (a buffer allocated per step,
// per head or per token of context) shows up as a number, not as a slowdown.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "lm/cache/cache.h"
#include "lm/load.h"
#include "support/allocation_counter.h"

namespace {

namespace fs = std::filesystem;

// Measured on stories260K: 191 per step for 5 layers (~38 per layer: each lm::Tensor is four
// allocations — storage, its control block, shape, strides — and a layer builds the query,
// key, value and output tensors, the cache's two returned views and their copies). Before the
// scratch buffers, the pool's non-allocating body and the attention's grow-only buffers,
// every matmul and every working vector allocated on top of that.
constexpr int64_t kPerLayerBound = 40;

int64_t allocations_per_step(lm::Model& model, lm::CacheList& caches, int64_t steps) {
  std::vector<float> logits;
  const auto before = test_support::allocation_snapshot();
  for (int64_t i = 0; i < steps; ++i) model.forward({static_cast<int32_t>(1 + i % 100)}, caches, logits);
  return (test_support::allocation_snapshot().allocations - before.allocations) / steps;
}

TEST(DecodeAllocations, FixedPerLayerAndIndependentOfContext) {
  const fs::path path = fs::path(VQ_SHARED_DIR) / "models/stories260K/stories260K.gguf";
  lm::LoadOptions options;
  options.threads = 1;  // the counter is process-wide: keep workers out of the picture
  const auto loaded = lm::load(path.string(), options);
  lm::Model& model = *loaded.model;
  lm::CacheList caches = lm::make_prompt_cache(model);
  std::vector<float> logits;
  // Warm-up: a prompt, then one step (the first step of a shape sizes the buffers).
  model.forward({1, 2, 3, 4, 5, 6, 7, 8}, caches, logits);
  model.forward({9}, caches, logits);
  const int64_t layers = model.config().n_layers;
  const int64_t early = allocations_per_step(model, caches, 16);
  // 200 tokens later the count per step is the same: nothing scales with the context.
  for (int i = 0; i < 200; ++i) model.forward({static_cast<int32_t>(10 + i % 50)}, caches, logits);
  const int64_t late = allocations_per_step(model, caches, 16);
  std::cout << "[allocations] per decode step: " << early << " (" << layers << " layers)" << std::endl;
  EXPECT_EQ(early, late);
  EXPECT_LE(early, kPerLayerBound * layers);
}

}  // namespace
