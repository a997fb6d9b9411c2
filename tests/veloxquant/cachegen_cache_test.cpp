// cachegen (docs/methods/cachegen.md) against references written from its card and the spec: the
// rANS coder round-trips exactly and lands near the order-0 entropy, the stored codes are KIVI's
// group code (written out independently here), the anchor delta is lossless, the layer schedule
// follows the spec's rule (expected values worked out by hand), the bytes are the allocation,
// fused attention equals attention over the fetched rows, and trim / state behave.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "base/error.h"
#include "support/allocation_counter.h"
#include "support/group_code_reference.h"
#include "support/fused_vs_fetched.h"
#include "support/kv_test_data.h"
#include "support/option_error.h"
#include "support/reference_attention.h"
#include "veloxquant/caches/cachegen_cache.h"
#include "veloxquant/core/rans_coder.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

std::vector<uint8_t> round_trip(const std::vector<uint8_t>& symbols, int alphabet, std::size_t* coded = nullptr,
                                double* entropy = nullptr) {
  uint32_t counts[256] = {};
  for (uint8_t s : symbols) ++counts[s];
  const std::vector<uint16_t> freqs = core::normalized_frequencies(counts, alphabet);
  uint32_t sum = 0;
  for (uint16_t f : freqs) sum += f;
  EXPECT_EQ(sum, core::kProbScale);
  std::vector<uint8_t> bytes;
  const std::size_t n = core::rans_encode(symbols.data(), symbols.size(), freqs.data(), alphabet, bytes);
  EXPECT_EQ(n, bytes.size());
  if (coded) *coded = bytes.size();
  if (entropy) *entropy = core::order0_entropy_bits(counts, alphabet);
  std::vector<uint8_t> back(symbols.size());
  core::rans_decode(bytes.data(), bytes.size(), freqs.data(), alphabet, back.size(), back.data());
  return back;
}

TEST(CachegenRans, RoundTripsRandomAndSkewedStreamsExactly) {
  std::mt19937_64 rng(5);
  for (int alphabet : {1, 2, 4, 16, 256}) {
    for (std::size_t n : {1u, 7u, 1000u, 20000u}) {
      std::uniform_int_distribution<int> uniform(0, alphabet - 1);
      std::geometric_distribution<int> skewed(0.6);
      for (int kind = 0; kind < 2; ++kind) {
        std::vector<uint8_t> s(n);
        for (auto& x : s) x = static_cast<uint8_t>(kind == 0 ? uniform(rng) : std::min(skewed(rng), alphabet - 1));
        EXPECT_EQ(round_trip(s, alphabet), s) << "alphabet " << alphabet << " n " << n << " kind " << kind;
      }
    }
  }
}

TEST(CachegenRans, LongSkewedStreamsCostTheirOrder0Entropy) {
  std::mt19937_64 rng(9);
  for (double p : {0.3, 0.6, 0.9}) {
    std::geometric_distribution<int> skewed(p);
    std::vector<uint8_t> s(200000);
    for (auto& x : s) x = static_cast<uint8_t>(std::min(skewed(rng), 15));
    std::size_t coded = 0;
    double entropy = 0;
    EXPECT_EQ(round_trip(s, 16, &coded, &entropy), s);
    EXPECT_LE(8.0 * static_cast<double>(coded), entropy * 1.02 + 64) << "p " << p;
    EXPECT_GE(8.0 * static_cast<double>(coded), entropy * 0.999) << "p " << p;
  }
}

TEST(CachegenRans, CorruptedStreamsAreRefused) {
  std::vector<uint8_t> s(500);
  for (std::size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(i % 7 == 0 ? 3 : i % 2);
  uint32_t counts[256] = {};
  for (uint8_t x : s) ++counts[x];
  const std::vector<uint16_t> freqs = core::normalized_frequencies(counts, 4);
  std::vector<uint8_t> bytes;
  core::rans_encode(s.data(), s.size(), freqs.data(), 4, bytes);
  std::vector<uint8_t> back(s.size());
  EXPECT_THROW(core::rans_decode(bytes.data(), bytes.size() - 1, freqs.data(), 4, back.size(), back.data()),
               base::FormatError);
  std::vector<uint16_t> bad = freqs;
  bad[0] += 1;
  EXPECT_THROW(core::rans_decode(bytes.data(), bytes.size(), bad.data(), 4, back.size(), back.data()),
               base::FormatError);
}

// KIVI's group code of x (count elements at stride) from the spec: codes and reconstruction.
void reference_code(const float* x, int64_t count, int64_t stride, int bits, uint8_t* codes, float* out) {
  float lo = x[0], hi = x[0];
  for (int64_t i = 0; i < count; ++i) {
    lo = std::min(lo, x[i * stride]);
    hi = std::max(hi, x[i * stride]);
  }
  const float levels = static_cast<float>((1 << bits) - 1);
  const float mn = test_support::f16_round(lo);
  const float scale = test_support::f16_round(std::max((hi - mn) / levels, 1e-8f));
  for (int64_t i = 0; i < count; ++i) {
    const float code = std::clamp(std::nearbyint((x[i * stride] - mn) / scale), 0.0f, levels);
    codes[i * stride] = static_cast<uint8_t>(code);
    out[i * stride] = code * scale + mn;
  }
}

// One record's expected codes and values: per-channel groups (keys with per_channel) or
// per-row groups of `group` channels, from reference_code.
void reference_record(const float* x, bool channel_groups, int64_t group, int64_t d, int bits,
                      std::vector<uint8_t>& want_codes, std::vector<float>& want) {
  if (channel_groups) {
    for (int64_t c = 0; c < d; ++c) reference_code(x + c, group, d, bits, want_codes.data() + c, want.data() + c);
    return;
  }
  for (int64_t r = 0; r < group; ++r) {
    for (int64_t c0 = 0; c0 < d; c0 += group) {
      const int64_t n = std::min(group, d - c0);
      reference_code(x + r * d + c0, n, 1, bits, want_codes.data() + r * d + c0, want.data() + r * d + c0);
    }
  }
}

// 70 tokens in two calls (30, 40) into a cache of 2 heads, d 24, groups of 16: each of the 4
// records' codes and decoded rows equal the group quantizer's, fetched rows equal the decoded
// ones, and the 6-token tail comes back as given.
void check_codes_match(int bits, bool per_channel, bool delta) {
  const int64_t heads = 2, t = 70, d = 24, group = 16;
  CachegenCache cache(bits, static_cast<int>(group), delta, per_channel);
  const lm::Tensor k = test_support::random_kv(1, heads, t, d, 3, lm::DType::F32);
  const lm::Tensor v = test_support::random_kv(1, heads, t, d, 4, lm::DType::F32);
  cache.update_and_fetch(test_support::token_rows(k, 0, 30), test_support::token_rows(v, 0, 30));
  const lm::KeysValues kv =
      cache.update_and_fetch(test_support::token_rows(k, 30, t), test_support::token_rows(v, 30, t));
  ASSERT_EQ(cache.frontier(), 64);
  const std::vector<float> kf = k.to_f32(), vf = v.to_f32(), gk = kv.keys.to_f32(), gv = kv.values.to_f32();
  std::vector<float> rows(group * d), want(group * d);
  std::vector<uint8_t> codes(group * d), want_codes(group * d);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t blk = 0; blk < 4; ++blk) {
      for (int kvi = 0; kvi < 2; ++kvi) {
        const float* x = (kvi == 0 ? kf : vf).data() + (h * t + blk * group) * d;
        reference_record(x, kvi == 0 && per_channel, group, d, bits, want_codes, want);
        cache.decode_record(blk, 0, h, kvi, rows.data(), codes.data());
        EXPECT_EQ(codes, want_codes) << bits << " " << per_channel << " " << delta;
        EXPECT_EQ(rows, want) << bits << " " << per_channel << " " << delta;
        const std::vector<float>& fetched = kvi == 0 ? gk : gv;
        for (int64_t i = 0; i < group * d; ++i) {
          ASSERT_EQ(fetched[static_cast<std::size_t>((h * t + blk * group) * d + i)],
                    want[static_cast<std::size_t>(i)]);
        }
      }
    }
    for (int64_t i = 64 * d; i < t * d; ++i) {  // the tail comes back as given
      ASSERT_EQ(gk[static_cast<std::size_t>(h * t * d + i)], kf[static_cast<std::size_t>(h * t * d + i)]);
    }
  }
}

TEST(Cachegen, CodesMatchTheGroupQuantizerBitExactly) {
  for (int bits : {2, 4, 8}) {
    for (bool per_channel : {true, false}) {
      for (bool delta : {true, false}) {
        check_codes_match(bits, per_channel, delta);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Smooth keys / values: slow sinusoids over the tokens, a different offset per channel.
lm::Tensor smooth_kv(int64_t heads, int64_t t, int64_t d, double phase) {
  std::vector<float> x(static_cast<std::size_t>(heads * t * d));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = 0; r < t; ++r) {
      for (int64_t c = 0; c < d; ++c) {
        x[static_cast<std::size_t>((h * t + r) * d + c)] =
            static_cast<float>(std::sin(0.02 * r + 0.7 * c + phase + h) * 3.0 + 0.05 * std::cos(1.3 * r + c));
      }
    }
  }
  return lm::Tensor::from_f32(x, {1, heads, t, d}, lm::DType::F32);
}

TEST(Cachegen, DeltaIsLosslessAndSmallerOnSmoothData) {
  const int64_t heads = 3, t = 256, d = 64;
  const lm::Tensor k = smooth_kv(heads, t, d, 0.0), v = smooth_kv(heads, t, d, 1.0);
  for (int bits : {2, 4, 6}) {
    CachegenCache with(bits, 32, true, true), without(bits, 32, false, true);
    const lm::KeysValues a = with.update_and_fetch(k, v), b = without.update_and_fetch(k, v);
    EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
    EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
    const CachegenStorage sa = with.storage(), sb = without.storage();
    EXPECT_EQ(sa.records, 2u * heads * (t / 32));
    EXPECT_LT(sa.payload_bytes, sb.payload_bytes) << "bits " << bits;
    // Each stream is within 2% (+ its 4 state bytes) of its order-0 entropy.
    for (const CachegenStorage& s : {sa, sb}) {
      EXPECT_LE(8.0 * static_cast<double>(s.payload_bytes), s.entropy_bits * 1.02 + 8.0 * 5 * s.records);
    }
  }
}

TEST(Cachegen, LayerScheduleFollowsTheSpecRule) {
  // n = 30, 3 groups, base 4: bounds [0, 10, 20, 30] -> 4, 3, 2.
  std::vector<int> want(30, 4);
  std::fill(want.begin() + 10, want.begin() + 20, 3);
  std::fill(want.begin() + 20, want.end(), 2);
  EXPECT_EQ(cachegen_layer_bits(30, 3, 4), want);
  // n = 5, 2 groups: 2.5 rounds half to even -> 2; bounds [0, 2, 5].
  EXPECT_EQ(cachegen_layer_bits(5, 2, 3), (std::vector<int>{3, 3, 2, 2, 2}));
  // n = 7, 3 groups: 7/3 = 2.33 -> 2, 14/3 = 4.67 -> 5; bounds [0, 2, 5, 7].
  EXPECT_EQ(cachegen_layer_bits(7, 3, 8), (std::vector<int>{8, 8, 7, 7, 7, 6, 6}));
  // n = 6, 4 groups: 1.5 -> 2, 3, 4.5 -> 4; bounds [0, 2, 3, 4, 6]; 5 - 3 = 2.
  EXPECT_EQ(cachegen_layer_bits(6, 4, 5), (std::vector<int>{5, 5, 4, 3, 2, 2}));
  // More groups than layers: g = n; floor at 2.
  EXPECT_EQ(cachegen_layer_bits(2, 3, 4), (std::vector<int>{4, 3}));
  EXPECT_EQ(cachegen_layer_bits(3, 3, 2), (std::vector<int>{2, 2, 2}));
}

class LayersModel : public lm::Model {
 public:
  explicit LayersModel(int n) : layers_(static_cast<std::size_t>(n)) {
    config_.architecture = "layers";
    config_.n_layers = n;
    config_.head_dim = 16;
    config_.n_heads = 2;
    config_.n_kv_heads = 1;
    config_.dim = 32;
  }
  const lm::ModelConfig& config() const override { return config_; }
  const std::vector<lm::LayerInfo>& layers() const override { return layers_; }
  lm::CacheList native_make_cache() const override { return {}; }
  void forward(const std::vector<int32_t>&, lm::CacheList&, std::vector<float>&, std::vector<float>*) const override {}

 private:
  lm::ModelConfig config_;
  std::vector<lm::LayerInfo> layers_;
};

TEST(Cachegen, ForModelInjectsEachLayersBits) {
  LayersModel model(30);
  KVCacheConfig c;
  c.method = "cachegen";
  const lm::CacheList caches = KVCacheBuilder::for_model(model, c);
  ASSERT_EQ(caches.size(), 30u);
  for (std::size_t i = 0; i < caches.size(); ++i) {
    const auto* cache = dynamic_cast<const CachegenCache*>(caches[i].get());
    ASSERT_NE(cache, nullptr);
    EXPECT_EQ(cache->bits(), i < 10 ? 4 : i < 20 ? 3 : 2) << "layer " << i;
  }
  // A single cache without for_model uses cachegen_bits.
  c.options<CachegenOptions>().cachegen_bits = 6;
  EXPECT_EQ(dynamic_cast<const CachegenCache&>(*KVCacheBuilder(c).build().serving()).bits(), 6);
}

TEST(Cachegen, BytesAreReallyAllocated) {
  const int64_t b = 1, h = 3, d = 64;
  const auto before = test_support::allocation_snapshot();
  KVCacheConfig c;
  c.method = "cachegen";
  c.head_dim = d;
  auto cache = KVCacheBuilder(c).build().serving();
  for (int i = 0; i < 3; ++i) {
    cache->update_and_fetch(test_support::random_kv(b, h, 100, d, i), test_support::random_kv(b, h, 100, d, i + 9));
  }
  const auto after = test_support::allocation_snapshot();
  EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes), cache->nbytes());
  // Resident: 300 rows -> 9 blocks of 32 coded, capacity 512 rows (256-row steps); per head and
  // row 8 u32 words of 4-bit key codes and 8 of value codes, per block 64 f16 (scale, min) key
  // pairs, per row 2 value pairs; the tails [3, 32, 64] f16 for keys and values.
  const std::size_t per_head = 512 * (32 + 32) + 16 * 64 * 4 + 512 * 2 * 4;
  const std::size_t tails = 2 * h * 32 * d * 2;
  EXPECT_EQ(cache->nbytes(), 3 * per_head + tails);
  // The stream form: 9 blocks x 3 heads x (keys, values) = 54 records; uniform 4-bit codes do not
  // compress, so the payload is close to the packed size.
  const CachegenStorage s = dynamic_cast<const CachegenCache&>(*cache).storage();
  EXPECT_EQ(s.records, 54u);
  EXPECT_EQ(s.table_bytes, 54u * 16 * 2);
  EXPECT_EQ(s.param_bytes, 27u * (64 * 4) + 27u * (32 * 2 * 4));
  EXPECT_LE(s.payload_bytes, s.packed_bytes * 102 / 100 + std::size_t{54} * 4);
  // state() writes that stream: its arena holds exactly the records.
  const std::vector<lm::Tensor> state = cache->state();
  EXPECT_EQ(static_cast<std::size_t>(state[0].dim(0)), s.param_bytes + s.table_bytes + s.payload_bytes);
  EXPECT_EQ(state[1].dim(0), 55);
}

TEST(Cachegen, FusedAttentionEqualsAttentionOverFetchedRows) {
  const int64_t heads = 2, d = 64;
  // GQA groups of 1, 3 and 8; per-channel keys read through KIVI's row source, per-token keys
  // through decoded blocks.
  for (const int64_t hq : {2, 6, 16})
    for (const auto& [bits, group, per_channel] :
         {std::tuple{4, 32, true}, std::tuple{2, 32, false}, std::tuple{3, 8, true}, std::tuple{8, 100, true},
          std::tuple{5, 16, true}}) {
      CachegenCache fused(bits, group, true, per_channel), plain(bits, group, true, per_channel);
      const std::vector<int64_t> chunks{150, 17, 1, 1, 70};
      const std::vector<float> worst = test_support::fused_vs_fetched(fused, plain, heads, hq, d, chunks, 600);
      for (std::size_t c = 0; c < chunks.size(); ++c) {
        // 2e-3 as the serving contract's f32 bound: KIVI's key scores round each block's folded query
        // to 16-bit integers (attention/integer_key_scores.h), ~1e-3 in the outputs at worst here.
        EXPECT_LE(worst[c], 2e-3f) << "bits " << bits << " group " << group << " chunk " << chunks[c] << " hq " << hq;
      }
    }
}

TEST(Cachegen, TrimReopensTheLastBlockFromItsCodes) {
  // 40 rows in blocks of 8, trimmed to 23: blocks 0, 1 stay, block 2 reopens with 7 decoded rows.
  const int64_t heads = 2, d = 16, t = 40, keep = 23;
  const lm::Tensor k = test_support::random_kv(1, heads, t, d, 21, lm::DType::F32);
  const lm::Tensor v = test_support::random_kv(1, heads, t, d, 22, lm::DType::F32);
  CachegenCache trimmed(3, 8, true, true);
  const lm::KeysValues full = trimmed.update_and_fetch(k, v);
  EXPECT_EQ(trimmed.trim(t - keep), t - keep);
  EXPECT_EQ(trimmed.offset(), keep);
  EXPECT_EQ(trimmed.frontier(), 16);
  CachegenCache fresh(3, 8, true, true);
  fresh.update_and_fetch(test_support::token_rows(full.keys, 0, keep), test_support::token_rows(full.values, 0, keep));
  EXPECT_EQ(trimmed.state()[0].to_f32(), fresh.state()[0].to_f32());  // same arena bytes
  const lm::Tensor k2 = test_support::random_kv(1, heads, 30, d, 23, lm::DType::F32);
  const lm::Tensor v2 = test_support::random_kv(1, heads, 30, d, 24, lm::DType::F32);
  const lm::KeysValues a = trimmed.update_and_fetch(k2, v2), b = fresh.update_and_fetch(k2, v2);
  EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
  EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
  EXPECT_EQ(trimmed.trim(1000), 53);
  EXPECT_TRUE(trimmed.empty());
}

TEST(Cachegen, StateRoundTripsAndBadStateIsRefused) {
  CachegenCache cache(4, 16, true, true);
  const lm::Tensor k = test_support::random_kv(1, 2, 50, 32, 1, lm::DType::F16);
  const lm::Tensor v = test_support::random_kv(1, 2, 50, 32, 2, lm::DType::F16);
  const lm::KeysValues kv = cache.update_and_fetch(k, v);
  CachegenCache restored(2, 1, false, false);
  restored.from_state(cache.state(), cache.meta_state());
  const lm::Tensor k1 = test_support::random_kv(1, 2, 1, 32, 3, lm::DType::F16);
  const lm::KeysValues a = restored.update_and_fetch(k1, k1), b = cache.update_and_fetch(k1, k1);
  EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
  EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
  EXPECT_EQ(restored.nbytes() > 0, true);
  std::vector<lm::Tensor> state = cache.state();
  state[1] = state[1].slice(0, 0, state[1].dim(0) - 1);
  EXPECT_THROW(restored.from_state(state, cache.meta_state()), base::FormatError);
  // A clone is independent.
  auto copy = cache.clone();
  cache.trim(20);
  EXPECT_EQ(copy->offset(), 51);
}

TEST(Cachegen, BadOptionsNameTheField) {
  const auto message = [](const std::function<void(CachegenOptions&)>& change) {
    return test_support::option_error("cachegen", change);
  };
  EXPECT_NE(message([](CachegenOptions& o) { o.cachegen_bits = 1; }).find("cachegen_bits"), std::string::npos);
  EXPECT_NE(message([](CachegenOptions& o) { o.cachegen_bits = 9; }).find("cachegen_bits"), std::string::npos);
  EXPECT_NE(message([](CachegenOptions& o) { o.cachegen_group_size = 0; }).find("cachegen_group_size"),
            std::string::npos);
  EXPECT_NE(message([](CachegenOptions& o) { o.cachegen_layer_groups = 0; }).find("cachegen_layer_groups"),
            std::string::npos);
  EXPECT_NE(message([](CachegenOptions& o) { o.cachegen_resolved_bits = 1; }).find("cachegen_resolved_bits"),
            std::string::npos);
  EXPECT_EQ(message([](CachegenOptions&) {}), "accepted");
}

}  // namespace
}  // namespace veloxquant
