// lm::FullKVCache against mlx_lm's KVCache semantics: contents are the concatenation of what
// was fed, capacity grows to offset + ceil(S/256)*256 rows, trim/state/clone behave as if the
// cache had been fed only the kept tokens, and nbytes() is what is really allocated.
#include "lm/cache/full_kv_cache.h"

#include <gtest/gtest.h>

#include "base/error.h"
#include "support/allocation_counter.h"
#include "support/kv_test_data.h"

namespace {

using lm::DType;
using lm::FullKVCache;
using lm::Tensor;
using test_support::concat_tokens_f32;
using test_support::random_kv;

constexpr int64_t kB = 1, kH = 2, kD = 8;

// Bytes of keys + values for `rows` rows of capacity at `esize` bytes per element.
std::size_t buffer_bytes(int64_t rows, std::size_t esize, int64_t batch = kB, int64_t heads = kH, int64_t dim = kD) {
  return 2 * static_cast<std::size_t>(batch * heads * rows * dim) * esize;
}

TEST(FullKVCache, ReturnsConcatenationOfEverythingFedInInputDtype) {
  FullKVCache cache(DType::F16);
  EXPECT_TRUE(cache.empty());
  EXPECT_EQ(cache.nbytes(), 0u);
  std::vector<Tensor> keys, values;
  const std::vector<int64_t> chunks = {5, 1, 1, 3};
  uint64_t seed = 1;
  for (int64_t s : chunks) {
    keys.push_back(random_kv(kB, kH, s, kD, seed++));
    values.push_back(random_kv(kB, kH, s, kD, seed++));
    const auto kv = cache.update_and_fetch(keys.back(), values.back());
    int64_t total = 0;
    for (const auto& k : keys) total += k.dim(2);
    EXPECT_EQ(cache.offset(), total);
    EXPECT_EQ(kv.keys.shape(), (lm::Shape{kB, kH, total, kD}));
    EXPECT_EQ(kv.values.shape(), (lm::Shape{kB, kH, total, kD}));
    EXPECT_EQ(kv.keys.dtype(), DType::F16);
    EXPECT_EQ(kv.keys.to_f32(), concat_tokens_f32(keys));
    EXPECT_EQ(kv.values.to_f32(), concat_tokens_f32(values));
  }
  EXPECT_FALSE(cache.empty());
}

TEST(FullKVCache, GrowsInStepsOf256LikeMlxLm) {
  FullKVCache cache(DType::F16);
  cache.update_and_fetch(random_kv(kB, kH, 3, kD, 1), random_kv(kB, kH, 3, kD, 2));
  EXPECT_EQ(cache.key_buffer().dim(2), 256);
  EXPECT_EQ(cache.nbytes(), buffer_bytes(256, 2));
  // 253 more still fit into the first 256 rows.
  cache.update_and_fetch(random_kv(kB, kH, 253, kD, 3), random_kv(kB, kH, 253, kD, 4));
  EXPECT_EQ(cache.key_buffer().dim(2), 256);
  // One more token: offset 256 + one step.
  cache.update_and_fetch(random_kv(kB, kH, 1, kD, 5), random_kv(kB, kH, 1, kD, 6));
  EXPECT_EQ(cache.key_buffer().dim(2), 512);
  EXPECT_EQ(cache.nbytes(), buffer_bytes(512, 2));
  // 300 tokens at offset 257 need ceil(300/256) = 2 steps on top of the 257 kept rows.
  cache.update_and_fetch(random_kv(kB, kH, 300, kD, 7), random_kv(kB, kH, 300, kD, 8));
  EXPECT_EQ(cache.offset(), 557);
  EXPECT_EQ(cache.key_buffer().dim(2), 257 + 512);
  EXPECT_EQ(cache.nbytes(), buffer_bytes(769, 2));
}

TEST(FullKVCache, NbytesEqualsBytesReallyAllocated) {
  for (DType dtype : {DType::F16, DType::BF16, DType::F32}) {
    const Tensor k1 = random_kv(kB, kH, 40, kD, 11, DType::F32), v1 = random_kv(kB, kH, 40, kD, 12, DType::F32);
    const Tensor k2 = random_kv(kB, kH, 300, kD, 13, DType::F32), v2 = random_kv(kB, kH, 300, kD, 14, DType::F32);
    const auto before = test_support::allocation_snapshot();
    {
      auto cache = std::make_shared<FullKVCache>(dtype);
      cache->update_and_fetch(k1, v1);
      cache->update_and_fetch(k2, v2);
      const auto during = test_support::allocation_snapshot();
      EXPECT_EQ(during.aligned_live_bytes - before.aligned_live_bytes, static_cast<int64_t>(cache->nbytes()))
          << lm::dtype_name(dtype);
      EXPECT_EQ(cache->nbytes(), buffer_bytes(40 + 512, lm::dtype_size(dtype)));
    }
    EXPECT_EQ(test_support::allocation_snapshot().aligned_live_bytes, before.aligned_live_bytes);
  }
}

TEST(FullKVCache, ConvertsWhenInputDtypeDiffersFromStorage) {
  FullKVCache cache(DType::BF16);
  const Tensor k = random_kv(kB, kH, 4, kD, 21, DType::F32);
  const Tensor v = random_kv(kB, kH, 4, kD, 22, DType::F32);
  const auto kv = cache.update_and_fetch(k, v);
  EXPECT_EQ(kv.keys.dtype(), DType::F32);
  EXPECT_EQ(cache.key_buffer().dtype(), DType::BF16);
  // What comes back is the input rounded to bf16 (the storage precision), then widened.
  EXPECT_EQ(kv.keys.to_f32(), k.astype(DType::BF16).to_f32());
  EXPECT_EQ(kv.values.to_f32(), v.astype(DType::BF16).to_f32());
  EXPECT_NE(kv.keys.to_f32(), k.to_f32());
}

TEST(FullKVCache, TrimBehavesAsIfFedOnlyTheKeptTokens) {
  const Tensor k = random_kv(kB, kH, 10, kD, 31), v = random_kv(kB, kH, 10, kD, 32);
  const Tensor k_new = random_kv(kB, kH, 2, kD, 33), v_new = random_kv(kB, kH, 2, kD, 34);
  FullKVCache trimmed;
  trimmed.update_and_fetch(k, v);
  EXPECT_TRUE(trimmed.is_trimmable());
  EXPECT_EQ(trimmed.trim(4), 4);
  EXPECT_EQ(trimmed.offset(), 6);
  const auto got = trimmed.update_and_fetch(k_new, v_new);

  FullKVCache reference;
  reference.update_and_fetch(test_support::token_rows(k, 0, 6), test_support::token_rows(v, 0, 6));
  const auto want = reference.update_and_fetch(k_new, v_new);
  EXPECT_EQ(got.keys.to_f32(), want.keys.to_f32());
  EXPECT_EQ(got.values.to_f32(), want.values.to_f32());
  EXPECT_EQ(trimmed.offset(), 8);
  // Trimming more than is there removes what is there.
  EXPECT_EQ(trimmed.trim(100), 8);
  EXPECT_EQ(trimmed.offset(), 0);
  EXPECT_THROW(trimmed.trim(-1), base::InvalidArgument);
}

TEST(FullKVCache, StateRoundTripThenFurtherUpdates) {
  const Tensor k = random_kv(kB, kH, 7, kD, 41), v = random_kv(kB, kH, 7, kD, 42);
  FullKVCache source(DType::F16);
  source.update_and_fetch(k, v);
  const auto state = source.state();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[0].shape(), (lm::Shape{kB, kH, 7, kD}));
  EXPECT_EQ(state[0].to_f32(), k.to_f32());

  FullKVCache restored(DType::F32);  // meta_state carries the storage dtype
  restored.from_state(state, source.meta_state());
  EXPECT_EQ(restored.offset(), 7);
  EXPECT_EQ(restored.kv_dtype(), DType::F16);

  // Trim, then write in place: must not leak into the source's buffers.
  restored.trim(2);
  source.trim(2);
  const Tensor k2 = random_kv(kB, kH, 3, kD, 43), v2 = random_kv(kB, kH, 3, kD, 44);
  const auto a = restored.update_and_fetch(k2, v2);
  EXPECT_EQ(source.state()[0].to_f32(), test_support::token_rows(k, 0, 5).to_f32());
  const auto b = source.update_and_fetch(k2, v2);
  EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
  EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
}

TEST(FullKVCache, CloneIsDeepAndIndependent) {
  FullKVCache cache;
  cache.update_and_fetch(random_kv(kB, kH, 5, kD, 51), random_kv(kB, kH, 5, kD, 52));
  const auto copy = cache.clone();
  EXPECT_EQ(copy->offset(), 5);
  EXPECT_EQ(copy->nbytes(), cache.nbytes());
  const auto before = copy->state()[0].to_f32();
  cache.trim(3);
  cache.update_and_fetch(random_kv(kB, kH, 3, kD, 53), random_kv(kB, kH, 3, kD, 54));
  EXPECT_EQ(copy->offset(), 5);
  EXPECT_EQ(copy->state()[0].to_f32(), before);
}

TEST(FullKVCache, RejectsBadInputWithTypedErrors) {
  // Braces: with parentheses clang reads the statement as a declaration of `DType::U8` (and
  // refuses it), so nothing would be constructed there.
  EXPECT_THROW(FullKVCache{DType::U8}, base::InvalidArgument);
  FullKVCache cache;
  const Tensor three_d({1, 2, 8}, DType::F16);
  EXPECT_THROW(cache.update_and_fetch(three_d, three_d), base::InvalidArgument);
  cache.update_and_fetch(random_kv(1, 2, 1, 8, 61), random_kv(1, 2, 1, 8, 62));
  // A different head dim after the first update.
  EXPECT_THROW(cache.update_and_fetch(random_kv(1, 2, 1, 4, 63), random_kv(1, 2, 1, 4, 64)), base::InvalidArgument);
  EXPECT_THROW(cache.from_state({three_d}, {}), base::FormatError);
  EXPECT_THROW(cache.from_state(cache.state(), {"q4"}), base::FormatError);
  try {
    cache.update_and_fetch(random_kv(1, 2, 3, 8, 65), random_kv(1, 2, 2, 8, 66));
    FAIL() << "mismatched S accepted";
  } catch (const base::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("[1, 2, 3, 8]"), std::string::npos) << e.what();
  }
}

}  // namespace

// Replays traces recorded from mlx_lm's own KVCache (tools/make_kv_cache_fixtures.py): the
// buffer size after every update (growth in 256-token steps, cut to offset on growth) and the
// effect of trims must match.
#include <nlohmann/json.hpp>

#include <fstream>

namespace {

TEST(FullKVCache, MatchesMlxLmGrowthAndTrimTraces) {
  const std::string path = std::string(VQ_SOURCE_DIR) + "/tests/fixtures/kv_cache/mlx_lm_caches.json";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "missing fixture " << path;
  const nlohmann::json traces = nlohmann::json::parse(in);
  const int64_t heads = traces["kv_heads"], dim = traces["head_dim"];
  ASSERT_GE(traces["full"].size(), 2u);
  for (const auto& scenario : traces["full"]) {
    FullKVCache cache(DType::F32);
    int64_t fed = 0, step_index = 0;
    for (const auto& step : scenario["steps"]) {
      const std::string where = "step " + std::to_string(step_index++);
      if (step["op"] == "trim") {
        EXPECT_EQ(cache.trim(step["n"].get<int64_t>()), step["removed"].get<int64_t>()) << where;
        fed = cache.offset();
        continue;
      }
      const int64_t n = step["n"];
      const auto kv = cache.update_and_fetch(random_kv(1, heads, n, dim, static_cast<uint64_t>(fed)),
                                             random_kv(1, heads, n, dim, static_cast<uint64_t>(fed) + 7));
      fed += n;
      EXPECT_EQ(cache.offset(), step["offset"].get<int64_t>()) << where;
      EXPECT_EQ(kv.keys.dim(2), cache.offset()) << where;
      EXPECT_EQ(cache.key_buffer().dim(2), step["buffer_rows"].get<int64_t>()) << where;
      EXPECT_EQ(cache.nbytes(), buffer_bytes(step["buffer_rows"].get<int64_t>(), 4, 1, heads, dim)) << where;
    }
  }
}

}  // namespace
