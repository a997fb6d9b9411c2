// KV presets (presets/kv_presets.h): each resolves to a valid configuration whose resident
// bytes per token on SmolLM2's geometry (30 layers x 3 kv heads x head_dim 64, keys + values)
// are pinned and never exceed the llama.cpp type it is named after; unknown names are refused
// with the name and the list.
#include <gtest/gtest.h>

#include "support/kv_test_data.h"
#include "veloxquant/presets/kv_presets.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

// Bytes really allocated per token on SmolLM2 geometry: one layer's cache fed `tokens` tokens
// (a multiple of 256: no growth slack) x 30 layers.
double smollm2_bytes_per_token(const KvPreset& preset, int64_t tokens) {
  KVCacheConfig config = kv_preset_config(preset);
  config.head_dim = 64;
  auto cache = KVCacheBuilder(config).build().serving();
  cache->update_and_fetch(test_support::random_kv(1, 3, tokens, 64, 1), test_support::random_kv(1, 3, tokens, 64, 2));
  return static_cast<double>(cache->nbytes()) * 30 / static_cast<double>(tokens);
}

TEST(KvPresets, BytesPerTokenOnSmolLM2ArePinned) {
  // llama.cpp: 11520 cached elements per token on SmolLM2 (30 * 3 * 64 * 2) at 8.5 / 5.5 / 4.5
  // bits = 12240 / 7920 / 6480 bytes (issue 12); q3's budget is 3.5 bits = 5040.
  // q3 at 2048 tokens: rows of 55 bytes per head (keys 32 x 4 + 32 x 3 bits + 2 one-byte scales,
  // values 64 x 3 bits + 1), + 8 f16 key-mean rows (one per 256-row segment, 128 bytes each),
  // the sink key in 8-bit codes with 2 f16 scales (68) and 2-bit split labels (16) per head:
  // (2048 * 55 + 8 * 128 + 68 + 16) * 90 / 2048 = 4998.69140625. At 256 rows: one key-mean row,
  // (256 * 55 + 128 + 84) * 90 / 256 = 5024.53125.
  const double q3_at_2048 = (2048.0 * (16 + 12 + 2 + 24 + 1) + 8 * 128 + 68 + 16) * 90 / 2048;
  EXPECT_DOUBLE_EQ(q3_at_2048, 4998.69140625);
  EXPECT_DOUBLE_EQ(smollm2_bytes_per_token(require_kv_preset("q3"), 256), 5024.53125);
  const std::vector<std::tuple<std::string, double, double>> want = {
      {"q8", 12240, 12240}, {"q5", 7920, 7920}, {"q4", 6480, 6480}, {"q3", q3_at_2048, 5040}};
  ASSERT_EQ(kv_presets().size(), want.size());
  for (const auto& [name, bytes, budget] : want) {
    const KvPreset& preset = require_kv_preset(name);
    EXPECT_DOUBLE_EQ(smollm2_bytes_per_token(preset, 2048), bytes) << name;
    EXPECT_DOUBLE_EQ(preset.bits_per_element * 11520 / 8, budget) << name;
    // Never above the budget per allocated row, from the first growth step (256 rows) on.
    for (const int64_t rows : {256, 512, 768, 1024, 1280}) {
      EXPECT_LE(smollm2_bytes_per_token(preset, rows), budget) << name << " at " << rows << " rows";
    }
    EXPECT_LE(bytes, budget) << name;
  }
}

TEST(KvPresets, ResolveToServableValidConfigs) {
  for (const KvPreset& preset : kv_presets()) {
    const KVCacheConfig config = kv_preset_config(preset, 7);
    EXPECT_EQ(config.method, preset.method);
    EXPECT_EQ(config.seed, 7);
    EXPECT_TRUE(require_method(config.method).is_servable) << preset.name;
    EXPECT_FALSE(preset.why.empty());
    EXPECT_NE(kv_preset_settings(preset).find(preset.method), std::string::npos);
  }
}

TEST(KvPresets, UnknownPresetNamesItAndTheKnownOnes) {
  try {
    require_kv_preset("q6");
    FAIL() << "q6 accepted";
  } catch (const QuantizerConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'q6'"), std::string::npos) << what;
    EXPECT_NE(what.find("q8, q5, q4, q3"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace veloxquant
