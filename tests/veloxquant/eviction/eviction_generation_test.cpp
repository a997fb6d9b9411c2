// End to end: each eviction method drives real generation (lm::generate over the patched model,
// the host passing real queries) past its budget on stories260K and SmolLM2-135M, and at the end
// every layer's cache holds exactly its budget of rows with nbytes = the budget's bytes (a layer
// whose budget the run did not reach holds its rows rounded up to the growth step).
#include <gtest/gtest.h>

#include <cstdlib>
#include <algorithm>
#include <filesystem>
#include <set>

#include "lm/generate.h"
#include "lm/load.h"
#include "veloxquant/eviction/eviction_test_config.h"
#include "veloxquant/eviction/pyramid_schedule.h"

namespace veloxquant {
namespace {

const std::string kStories = std::string(VQ_SHARED_DIR) + "/models/stories260K/stories260K.gguf";
const std::string kSmolLM = std::string(VQ_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

// Bytes of `budget` f16 rows per head: keys + values + an i32 position (+ an f32 score).
std::size_t budget_bytes(const eviction::EvictionCache& c, int64_t budget) {
  const eviction::EvictionRows& r = c.rows();
  const int64_t per_row = 2 * r.key_dim() + 2 * r.value_dim() + 4 + (r.keeps_scores() ? 4 : 0);
  return static_cast<std::size_t>(r.batch() * r.heads() * budget * per_row);
}

void generate_past_budget(const std::string& model_path, int budget, int max_tokens, const std::string& prompt) {
  for (const std::string& method : eviction_test::eviction_methods()) {
    SCOPED_TRACE(method);
    lm::LoadedModel m = lm::load(model_path);
    const KVCacheConfig c = eviction_test::small_budget(method, budget);
    integration::patch_model_kv_cache(*m.model, c);
    auto hook = m.model->make_cache;
    lm::CacheList used;
    m.model->make_cache = [&] { return used = hook(); };
    lm::GenerateOptions o;
    o.max_tokens = max_tokens;
    o.temperature = 0.0f;
    const std::string text = lm::generate(*m.model, *m.tokenizer, prompt, o);
    EXPECT_FALSE(text.empty());
    ASSERT_FALSE(used.empty());
    const std::vector<int> pyramid = eviction::pyramid_budgets(budget, 4, 2.0, used.size());
    int64_t budget_sum = 0;
    std::set<int64_t> budgets;
    for (std::size_t layer = 0; layer < used.size(); ++layer) {
      const auto* cache = dynamic_cast<const eviction::EvictionCache*>(used[layer].get());
      ASSERT_NE(cache, nullptr) << "layer " << layer;
      // squeeze's budgets follow each layer's keys: checked as a whole below.
      const int64_t layer_budget = method == "pyramidkv" ? pyramid[layer]
                                   : method == "squeeze" ? cache->policy().budget
                                                         : budget;
      EXPECT_EQ(cache->policy().budget, layer_budget);
      budget_sum += layer_budget;
      budgets.insert(layer_budget);
      // pyramidkv's shallow layers may hold more than the run fed; every other layer is full.
      EXPECT_GT(cache->offset(), budget) << "generation did not run past the budget";
      EXPECT_TRUE(eviction_test::holds_expected_rows(cache->policy(), cache->rows().rows(), cache->offset()))
          << cache->rows().rows() << " rows after " << cache->offset() << " tokens";
      const int64_t step = eviction::EvictionRows::kGrowthStep;
      const int64_t held = std::min<int64_t>(layer_budget, (cache->rows().rows() + step - 1) / step * step);
      EXPECT_EQ(cache->nbytes(), budget_bytes(*cache, held));
      // The host offered queries on every step, so the methods that score by attention used them
      // (streaming_llm, knorm and qfilters never need them).
      EXPECT_EQ(cache->last_update_used_queries(), cache->policy().uses_attention());
    }
    if (method == "squeeze") {
      // Reallocated, not uniform; the mean stays the average budget up to rounding of each layer.
      EXPECT_GT(budgets.size(), 1u);
      EXPECT_LE(std::abs(budget_sum - static_cast<int64_t>(budget) * static_cast<int64_t>(used.size())),
                static_cast<int64_t>(used.size()));
    }
  }
}

TEST(EvictionGeneration, Stories260KRunsPastTheBudget) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "missing " << kStories;
  generate_past_budget(kStories, 32, 96, "Once upon a time");
}

TEST(EvictionGeneration, SmolLM2RunsPastTheBudget) {
  if (!std::filesystem::exists(kSmolLM)) GTEST_SKIP() << "SmolLM2 not fetched (scripts/fetch_models.sh): " << kSmolLM;
  generate_past_budget(kSmolLM, 48, 48, "The three primary colors are red, yellow and blue. Painters mix them to");
}

TEST(EvictionGeneration, PyramidKVHoldsLessThanTheNativeCacheAtShortContext) {
  // pyramidkv's default budgets (mean 512 rows per head, tapering from shallow to deep layers)
  // used to be allocated whole at the first token: on stories260K 400 KiB against the native
  // cache's 160 KiB after a few tokens. The rows now grow with what each layer holds.
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "missing " << kStories;
  lm::GenerateOptions o;
  o.max_tokens = 4;
  o.temperature = 0.0f;
  const auto cache_bytes = [&](bool pyramid, int64_t* offset) {
    lm::LoadedModel m = lm::load(kStories);
    if (pyramid) {
      KVCacheConfig c;
      c.method = "pyramidkv";
      integration::patch_model_kv_cache(*m.model, c);
    }
    auto hook = m.model->make_cache;
    lm::CacheList used;
    const lm::Model& model = *m.model;
    m.model->make_cache = [&] { return used = hook ? hook() : model.native_make_cache(); };
    lm::generate(*m.model, *m.tokenizer, "Once upon a time", o);
    std::size_t bytes = 0;
    for (const auto& cache : used) bytes += cache->nbytes();
    *offset = used.at(0)->offset();
    return bytes;
  };
  int64_t native_offset = 0, pyramid_offset = 0;
  const std::size_t native = cache_bytes(false, &native_offset);
  const std::size_t pyramid = cache_bytes(true, &pyramid_offset);
  ASSERT_EQ(pyramid_offset, native_offset);
  ASSERT_LE(pyramid_offset, eviction::EvictionRows::kGrowthStep);
  // Native: 5 layers x 4 kv heads x 256 rows (its growth step) x (8 + 8 f16 of key and value).
  EXPECT_EQ(native, 5u * 4 * 256 * 32);
  // pyramidkv: the budgets taper 1019, 766, 512, 258, 5 (the deepest layer at the floor
  // n_sink + 1), so four layers hold one growth step of 32 rows and the last its 5; each row is
  // 4 kv heads x (16 + 16 bytes of f16 key and value + a 4-byte position + a 4-byte score).
  EXPECT_EQ(eviction::pyramid_budgets(512, 4, 2.0, 5), (std::vector<int>{1019, 766, 512, 258, 5}));
  EXPECT_EQ(pyramid, (4u * 32 + 5) * 4 * 40);
}

}  // namespace
}  // namespace veloxquant
