// KiviCache against an independent reference of KIVI's group quantization (spec §11.9: keys per
// channel over token groups, values per token over channel groups, levels 2^b - 1, f16 params
// as in the KIVI paper) and its frontier rule floor(max(0, offset - R) / G) * G.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "support/allocation_counter.h"
#include "base/error.h"
#include "base/half.h"
#include "support/group_code_reference.h"
#include "support/kv_test_data.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

using test_support::reference_group;

int64_t frontier_for(int64_t offset, int64_t residual, int64_t group) {
  return (std::max<int64_t>(0, offset - residual) / group) * group;
}

TEST(KiviCache, FrontierFollowsTheGroupSnappedRule) {
  KiviCache cache(16, 2, 32, 128);
  int64_t fed = 0;
  uint64_t seed = 1;
  for (int64_t chunk : {100, 1, 1, 50, 7, 1, 200, 3}) {
    cache.update_and_fetch(test_support::random_kv(1, 2, chunk, 16, seed),
                           test_support::random_kv(1, 2, chunk, 16, seed + 100));
    ++seed;
    fed += chunk;
    EXPECT_EQ(cache.offset(), fed);
    EXPECT_EQ(cache.frontier(), frontier_for(fed, 128, 32)) << "after " << fed;
  }
}

TEST(KiviCache, MatchesTheReferenceQuantizationBitExactly) {
  const int d = 16, group = 8, bits = 2, residual = 4;
  KiviCache cache(d, bits, group, residual);
  const lm::Tensor k = test_support::random_kv(1, 1, 21, d, 11, lm::DType::F32);
  const lm::Tensor v = test_support::random_kv(1, 1, 21, d, 12, lm::DType::F32);
  const lm::KeysValues got = cache.update_and_fetch(k, v);
  ASSERT_EQ(cache.frontier(), 16);  // floor((21 - 4) / 8) * 8
  const std::vector<float> kf = k.to_f32(), vf = v.to_f32();
  const std::vector<float> gk = got.keys.to_f32(), gv = got.values.to_f32();
  for (int g = 0; g < 2; ++g) {
    for (int c = 0; c < d; ++c) {  // keys: one channel over the group's tokens
      std::vector<float> col;
      col.reserve(static_cast<std::size_t>(group));
      for (int t = 0; t < group; ++t) col.push_back(kf[(g * group + t) * d + c]);
      const std::vector<float> ref = reference_group(col, bits);
      for (int t = 0; t < group; ++t) EXPECT_EQ(gk[(g * group + t) * d + c], ref[t]) << g << " " << c << " " << t;
    }
  }
  for (int t = 0; t < 16; ++t) {  // values: one token over channel groups
    for (int cg = 0; cg < d / group; ++cg) {
      const std::ptrdiff_t at = std::ptrdiff_t{t} * d + std::ptrdiff_t{cg} * group;
      std::vector<float> row(vf.begin() + at, vf.begin() + at + group);
      const std::vector<float> ref = reference_group(row, bits);
      for (int c = 0; c < group; ++c) EXPECT_EQ(gv[t * d + cg * group + c], ref[c]) << t << " " << c;
    }
  }
  for (int i = 16 * d; i < 21 * d; ++i) {  // the residual window is returned exactly
    EXPECT_EQ(gk[i], kf[i]);
    EXPECT_EQ(gv[i], vf[i]);
  }
}

TEST(KiviCache, ValueGroupWiderThanHeadDimUsesOneGroupPerToken) {
  // stories260K has head_dim 8 < group 32: the original pads by repeating the last element,
  // which leaves min/max unchanged, so one group spans the whole row.
  KiviCache cache(8, 2, 32, 0);
  const lm::Tensor k = test_support::random_kv(1, 1, 32, 8, 3, lm::DType::F32);
  const lm::Tensor v = test_support::random_kv(1, 1, 32, 8, 4, lm::DType::F32);
  const std::vector<float> got = cache.update_and_fetch(k, v).values.to_f32();
  const std::vector<float> vf = v.to_f32();
  for (int t = 0; t < 32; ++t) {
    const std::vector<float> ref =
        reference_group({vf.begin() + std::ptrdiff_t{t} * 8, vf.begin() + std::ptrdiff_t{t + 1} * 8}, 2);
    for (int c = 0; c < 8; ++c) EXPECT_EQ(got[t * 8 + c], ref[c]);
  }
}

TEST(KiviCache, ErrorWithinHalfAStepPerGroup) {
  KiviCache cache(32, 3, 32, 0);
  const lm::Tensor k = test_support::random_kv(2, 2, 64, 32, 5, lm::DType::F32);
  const std::vector<float> got = cache.update_and_fetch(k, k).keys.to_f32();
  const std::vector<float> ref = k.to_f32();
  // Values lie in [-4, 4): a step is at most 8/7, the error at most half a step plus f16 rounding.
  for (std::size_t i = 0; i < ref.size(); ++i) EXPECT_LE(std::fabs(got[i] - ref[i]), 8.0f / 7.0f / 2.0f + 0.01f);
}

TEST(KiviCache, BytesAreTheLayoutAndReallyAllocated) {
  const int64_t b = 1, h = 2, d = 64;
  const auto before = test_support::allocation_snapshot();
  auto cache = std::make_unique<KiviCache>(d, 2, 32, 128);
  {
    for (int i = 0; i < 5; ++i) {
      cache->update_and_fetch(test_support::random_kv(b, h, 100, d, i), test_support::random_kv(b, h, 100, d, i + 9));
    }
  }
  const auto after = test_support::allocation_snapshot();
  EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes), cache->nbytes());
  // 500 tokens: frontier 352; quantized capacity grows in 256-row steps -> 512 rows.
  ASSERT_EQ(cache->frontier(), 352);
  const std::size_t rows = 512, heads = b * h;
  const std::size_t key_codes = heads * rows * (d / 16) * 4;       // 2-bit: 16 codes per u32 word
  const std::size_t key_params = heads * (rows / 32) * 2 * d * 2;  // f16 scale+min per channel per group
  const std::size_t value_codes = heads * rows * (d / 16) * 4;
  const std::size_t value_params = heads * rows * 2 * 2 * 2;    // 2 channel groups x (scale, min) f16
  const std::size_t residual = 2 * heads * (128 + 32) * d * 2;  // f16 tail, keys and values
  EXPECT_EQ(cache->nbytes(), key_codes + key_params + value_codes + value_params + residual);
}

TEST(KiviCache, TrimInsideTheWindowEqualsAFreshCacheExactly) {
  const lm::Tensor k = test_support::random_kv(1, 2, 300, 16, 21);
  const lm::Tensor v = test_support::random_kv(1, 2, 300, 16, 22);
  KiviCache trimmed(16, 2, 32, 128), fresh(16, 2, 32, 128);
  trimmed.update_and_fetch(k, v);
  EXPECT_EQ(trimmed.trim(5), 5);
  fresh.update_and_fetch(test_support::token_rows(k, 0, 295), test_support::token_rows(v, 0, 295));
  EXPECT_EQ(trimmed.frontier(), fresh.frontier());
  const lm::Tensor k2 = test_support::random_kv(1, 2, 40, 16, 23), v2 = test_support::random_kv(1, 2, 40, 16, 24);
  const lm::KeysValues a = trimmed.update_and_fetch(k2, v2);
  const lm::KeysValues b = fresh.update_and_fetch(k2, v2);
  EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
  EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
  EXPECT_EQ(trimmed.offset(), 335);
}

TEST(KiviCache, TrimAcrossTheFrontierRollsItBack) {
  const lm::Tensor k = test_support::random_kv(1, 1, 300, 16, 31);
  const lm::Tensor v = test_support::random_kv(1, 1, 300, 16, 32);
  KiviCache cache(16, 2, 32, 128), fresh(16, 2, 32, 128);
  cache.update_and_fetch(k, v);
  ASSERT_EQ(cache.frontier(), 160);
  EXPECT_EQ(cache.trim(100), 100);
  EXPECT_EQ(cache.frontier(), frontier_for(200, 128, 32));  // 64
  EXPECT_EQ(cache.offset(), 200);
  const lm::KeysValues f =
      fresh.update_and_fetch(test_support::token_rows(k, 0, 200), test_support::token_rows(v, 0, 200));
  const lm::Tensor k2 = test_support::random_kv(1, 1, 1, 16, 33), v2 = test_support::random_kv(1, 1, 1, 16, 34);
  const std::vector<float> a = cache.update_and_fetch(k2, v2).keys.to_f32();
  const std::vector<float> b = fresh.update_and_fetch(k2, v2).keys.to_f32();
  ASSERT_EQ(a.size(), b.size());
  // Groups below the new frontier are bit-identical; reopened rows [64, 160) carry their
  // quantization error (2-bit step on [-4, 4) values: at most 8/3/2 + f16 rounding).
  for (std::size_t i = 0; i < a.size(); ++i) {
    const std::size_t row = i / 16;
    if (row < 64 || row >= 160) {
      EXPECT_EQ(a[i], b[i]) << row;
    } else {
      EXPECT_LE(std::fabs(a[i] - b[i]), 8.0f / 3.0f / 2.0f + 0.02f) << row;
    }
  }
  EXPECT_EQ(cache.trim(1000), 201);
  EXPECT_TRUE(cache.empty());
  EXPECT_EQ(cache.frontier(), 0);
}

TEST(KiviCache, StateRoundTripThenMoreUpdates) {
  KiviCache cache(16, 4, 32, 16);
  cache.update_and_fetch(test_support::random_kv(1, 2, 90, 16, 41), test_support::random_kv(1, 2, 90, 16, 42));
  KiviCache restored(16, 2, 8, 0);  // other parameters: from_state takes them from meta_state
  restored.from_state(cache.state(), cache.meta_state());
  EXPECT_EQ(restored.offset(), 90);
  EXPECT_EQ(restored.frontier(), cache.frontier());
  EXPECT_EQ(restored.bits(), 4);
  const lm::Tensor k = test_support::random_kv(1, 2, 50, 16, 43), v = test_support::random_kv(1, 2, 50, 16, 44);
  const lm::KeysValues a = cache.update_and_fetch(k, v);
  const lm::KeysValues b = restored.update_and_fetch(k, v);
  EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
  EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
  EXPECT_THROW(restored.from_state(cache.state(), {"16", "4"}), base::FormatError);
}

TEST(KiviCache, BadParametersThrowTypedErrors) {
  EXPECT_THROW(KiviCache(16, 0, 32, 128), QuantizerConfigError);
  EXPECT_THROW(KiviCache(16, 9, 32, 128), QuantizerConfigError);
  EXPECT_THROW(KiviCache(16, 2, 0, 128), QuantizerConfigError);
  KiviCache cache(16, 2, 32, 128);
  cache.update_and_fetch(test_support::random_kv(1, 2, 4, 16, 1), test_support::random_kv(1, 2, 4, 16, 2));
  EXPECT_THROW(cache.update_and_fetch(test_support::random_kv(1, 3, 4, 16, 1), test_support::random_kv(1, 3, 4, 16, 2)),
               base::InvalidArgument);
  EXPECT_THROW(cache.trim(-1), base::InvalidArgument);
}

}  // namespace
}  // namespace veloxquant
