// turboquant_block serving cache: exact resident bytes (SmolLM2 geometry and growth), the
// reconstruction error of rotated block Lloyd-Max against the Gaussian Lloyd-Max distortion,
// rows decoded by an independent path (Rotation + quantizer called directly), state round trip,
// trim, clone, and the config's bit-width errors.
#include <gtest/gtest.h>

#include <tuple>

#include <algorithm>
#include <cmath>
#include <random>

#include "base/error.h"
#include "base/half.h"
#include "support/allocation_counter.h"
#include "support/kv_test_data.h"
#include "veloxquant/attention/byte_level_key_scores.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

lm::Tensor gaussian_kv(int64_t heads, int64_t tokens, int64_t dim, uint64_t seed, lm::DType dtype = lm::DType::F32) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> x(static_cast<std::size_t>(heads * tokens * dim));
  for (float& v : x) v = normal(rng);
  // A few large channels, as real keys have: the rotation must spread them.
  for (int64_t r = 0; r < heads * tokens; ++r) x[static_cast<std::size_t>(r * dim + 3)] *= 8.0f;
  return lm::Tensor::from_f32(x, {1, heads, tokens, dim}, dtype);
}

TEST(TurboQuantBlockCache, BytesPerTokenOnSmolLM2AreLlamaCppSizes) {
  // SmolLM2-135M: 30 layers x 3 kv heads x head_dim 64, keys + values. llama.cpp's q8_0 /
  // q5_0 / q4_0 K+V caches take 12240 / 7920 / 6480 bytes per token there (issue 12).
  const std::vector<std::tuple<int, int, int64_t>> cases = {{8, 8, 12240}, {5, 5, 7920}, {4, 4, 6480}, {3, 3, 5040},
                                                            {5, 3, 6480},  {4, 2, 5040}, {6, 4, 7920}};
  for (const auto& [kb, vb, want] : cases) {
    TurboQuantBlockCache cache(64, kb, vb, 42);
    EXPECT_EQ(int64_t{30} * 3 * cache.bytes_per_row(), want) << "key_bits " << kb << ", value_bits " << vb;
    // And what is really allocated: 2048 tokens = 8 growth steps, no slack.
    cache.update_and_fetch(gaussian_kv(3, 2048, 64, 1, lm::DType::F16), gaussian_kv(3, 2048, 64, 2, lm::DType::F16));
    EXPECT_EQ(static_cast<int64_t>(cache.nbytes()) * 30 / 2048, want);
  }
}

TEST(TurboQuantBlockCache, NbytesIsTheLayoutAfterGrowth) {
  const int64_t h = 2, d = 64;
  const auto before = test_support::allocation_snapshot();
  auto cache = std::make_unique<TurboQuantBlockCache>(d, 3, 5, 7);
  cache->update_and_fetch(gaussian_kv(h, 200, d, 3), gaussian_kv(h, 200, d, 4));
  EXPECT_EQ(cache->nbytes(), std::size_t(h * 256 * (24 + 4 + 40 + 4)));
  cache->update_and_fetch(gaussian_kv(h, 110, d, 5), gaussian_kv(h, 110, d, 6));
  EXPECT_EQ(cache->offset(), 310);
  const auto after = test_support::allocation_snapshot();
  // Growth keeps offset rows (200) then appends ceil(110/256) steps of 256.
  EXPECT_EQ(cache->nbytes(), std::size_t(h * (200 + 256) * (24 + 4 + 40 + 4)));
  EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes), cache->nbytes());
}

double relative_error(const lm::Tensor& got, const lm::Tensor& want) {
  const std::vector<float> g = got.to_f32(), w = want.to_f32();
  double err = 0.0, energy = 0.0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    err += double(g[i] - w[i]) * (g[i] - w[i]);
    energy += double(w[i]) * w[i];
  }
  return err / energy;
}

TEST(TurboQuantBlockCache, ReconstructionErrorIsBelowTheLloydMaxDistortion) {
  // The rotation is orthonormal, so the error in the model's basis is the error of the block
  // codes on rotated coordinates: below the Gaussian Lloyd-Max distortion with one global scale
  // (anchors §1.1: 0.0346 at b = 3, 0.0095 at 4; per-block scales do better), above Shannon's
  // 4^-b. Without the rotation the x8 channel would dominate every block it sits in.
  TurboQuantBlockCache cache(64, 3, 4, 42);
  const lm::Tensor k = gaussian_kv(3, 500, 64, 11), v = gaussian_kv(3, 500, 64, 12);
  const lm::KeysValues got = cache.update_and_fetch(k, v);
  EXPECT_LT(relative_error(got.keys, k), 0.0346);
  EXPECT_GT(relative_error(got.keys, k), 1.0 / 64);
  EXPECT_LT(relative_error(got.values, v), 0.0095);
  EXPECT_GT(relative_error(got.values, v), 1.0 / 256);
}

TEST(TurboQuantBlockCache, RowsAreTheRotatedBlockCodes) {
  // Independent decode: rotate with core::Rotation, block-quantize with the quantizer, rotate
  // back — the cache must return exactly that (f32 output).
  const int d = 64;
  const int64_t seed = 99;
  TurboQuantBlockCache cache(d, 4, 2, seed);
  const lm::Tensor k = gaussian_kv(2, 9, d, 21), v = gaussian_kv(2, 9, d, 22);
  const lm::KeysValues got = cache.update_and_fetch(k, v);
  const core::Rotation key_rot(d, static_cast<uint64_t>(seed));
  const core::Rotation value_rot(d, static_cast<uint64_t>(seed) ^ TurboQuantBlockCache::kValueSeedSalt);
  const quant::BlockLloydQuantizer kq(4), vq(2);
  const std::vector<float> kf = k.to_f32(), vf = v.to_f32(), gk = got.keys.to_f32(), gv = got.values.to_f32();
  std::vector<float> rotated(d), decoded(d), back(d);
  std::vector<uint8_t> packed(64);
  std::vector<uint16_t> scales(2);
  for (int64_t r = 0; r < 18; ++r) {
    for (int which = 0; which < 2; ++which) {
      const core::Rotation& rot = which == 0 ? key_rot : value_rot;
      const quant::BlockLloydQuantizer& q = which == 0 ? kq : vq;
      const float* x = (which == 0 ? kf : vf).data() + r * d;
      rot.forward(x, rotated.data());
      q.encode_row(rotated.data(), d, packed.data(), scales.data());
      q.decode_row(packed.data(), scales.data(), d, decoded.data());
      rot.inverse(decoded.data(), back.data());
      const float* g = (which == 0 ? gk : gv).data() + r * d;
      for (int i = 0; i < d; ++i) ASSERT_NEAR(g[i], back[i], 1e-5f) << "row " << r << (which ? " value" : " key");
    }
  }
}

TEST(TurboQuantBlockCache, StateRoundTripAndFurtherUpdates) {
  TurboQuantBlockCache cache(64, 5, 3, 3);
  cache.update_and_fetch(gaussian_kv(3, 40, 64, 31), gaussian_kv(3, 40, 64, 32));
  TurboQuantBlockCache restored(8, 1, 1, 0);  // everything comes from the meta
  restored.from_state(cache.state(), cache.meta_state());
  EXPECT_EQ(restored.offset(), 40);
  EXPECT_EQ(restored.key_bits(), 5);
  EXPECT_EQ(restored.value_bits(), 3);
  const lm::Tensor k2 = gaussian_kv(3, 7, 64, 33), v2 = gaussian_kv(3, 7, 64, 34);
  const lm::KeysValues a = cache.update_and_fetch(k2, v2), b = restored.update_and_fetch(k2, v2);
  EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
  EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
  // A meta that does not describe the tensors is refused, naming what is wrong.
  std::vector<std::string> meta = cache.meta_state();
  meta[1] = "4";
  EXPECT_THROW(restored.from_state(cache.state(), meta), base::FormatError);
}

lm::Tensor offset_kv(int64_t heads, int64_t tokens, int64_t dim, uint64_t seed, uint64_t offset_seed = 0) {
  // Rows = a large per-channel offset shared by every token + small token-specific noise: what
  // real keys look like in their slowly rotating RoPE channels. Calls that pass the same
  // offset_seed continue one sequence (the same offset); 0 draws it from `seed`.
  std::mt19937_64 rng(seed);
  std::mt19937_64 offset_rng(offset_seed != 0 ? offset_seed : seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> offset(static_cast<std::size_t>(dim));
  for (float& o : offset) o = 6.0f * normal(offset_seed != 0 ? offset_rng : rng);
  std::vector<float> x(static_cast<std::size_t>(heads * tokens * dim));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = offset[i % static_cast<std::size_t>(dim)] + 0.5f * normal(rng);
  return lm::Tensor::from_f32(x, {1, heads, tokens, dim}, lm::DType::F32);
}

TEST(TurboQuantBlockCache, MeanSmoothingRemovesACommonOffset) {
  // The error relative to the token-specific part (what attention scores depend on) shrinks by
  // a large factor once the shared offset is subtracted before quantization.
  TurboQuantBlockCache::Settings plain{64, 3, 3, 9};
  TurboQuantBlockCache::Settings smoothed = plain;
  smoothed.mean_rows = 64;
  const lm::Tensor k = offset_kv(2, 200, 64, 61), v = offset_kv(2, 200, 64, 62);
  TurboQuantBlockCache a(plain), b(smoothed);
  const double err_plain = relative_error(a.update_and_fetch(k, v).keys, k);
  const double err_smoothed = relative_error(b.update_and_fetch(k, v).keys, k);
  EXPECT_LT(err_smoothed * 20, err_plain) << err_plain << " vs " << err_smoothed;
  // Two f16 mean rows per head more than the plain cache.
  EXPECT_EQ(b.nbytes(), a.nbytes() + std::size_t{2} * 2 * 64 * 2);
  // A first call of one row cannot calibrate: no means, no bytes.
  TurboQuantBlockCache single(smoothed);
  single.update_and_fetch(k.slice(2, 0, 1).contiguous(), v.slice(2, 0, 1).contiguous());
  EXPECT_EQ(single.meta_state()[11], "uncalibrated");
}

TEST(TurboQuantBlockCache, SinkRowsAreExactAndCounted) {
  TurboQuantBlockCache::Settings settings{64, 2, 2, 5};
  settings.sink_rows = 3;
  TurboQuantBlockCache cache(settings);
  const lm::Tensor k = gaussian_kv(2, 2, 64, 71, lm::DType::F16), v = gaussian_kv(2, 2, 64, 72, lm::DType::F16);
  cache.update_and_fetch(k, v);  // rows 0, 1 are sinks
  const lm::Tensor k2 = gaussian_kv(2, 5, 64, 73, lm::DType::F16), v2 = gaussian_kv(2, 5, 64, 74, lm::DType::F16);
  const lm::KeysValues got = cache.update_and_fetch(k2, v2);  // row 2 (k2's first) is a sink too
  const std::vector<float> gk = got.keys.to_f32(), gv = got.values.to_f32();
  const std::vector<float> k1 = k.to_f32(), v1 = v.to_f32(), k2f = k2.to_f32(), v2f = v2.to_f32();
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t e = 0; e < 64; ++e) {
      for (int64_t r = 0; r < 2; ++r) {
        EXPECT_EQ(gk[static_cast<std::size_t>((h * 7 + r) * 64 + e)],
                  k1[static_cast<std::size_t>((h * 2 + r) * 64 + e)]);
        EXPECT_EQ(gv[static_cast<std::size_t>((h * 7 + r) * 64 + e)],
                  v1[static_cast<std::size_t>((h * 2 + r) * 64 + e)]);
      }
      EXPECT_EQ(gk[static_cast<std::size_t>((h * 7 + 2) * 64 + e)], k2f[static_cast<std::size_t>((h * 5) * 64 + e)]);
      EXPECT_EQ(gv[static_cast<std::size_t>((h * 7 + 2) * 64 + e)], v2f[static_cast<std::size_t>((h * 5) * 64 + e)]);
    }
  }
  EXPECT_NE(gk[static_cast<std::size_t>(3 * 64)], k2f[static_cast<std::size_t>(1 * 64)]);  // row 3 is coded (2 bits)
  // 256 coded rows of (16 + 4) * 2 bytes + 3 sink rows of 2 * 64 * 2 bytes, per head.
  EXPECT_EQ(cache.nbytes(), std::size_t(2 * (256 * 40 + 3 * 256)));
}

lm::Tensor k2_probe() { return offset_kv(3, 2, 64, 91); }
lm::Tensor v2_probe() { return offset_kv(3, 2, 64, 92); }

TEST(TurboQuantBlockCache, StateRoundTripWithMeansSinksAndBlocks) {
  TurboQuantBlockCache::Settings settings{64, 4, 3, 8};
  settings.mean_rows = 16;
  settings.sink_rows = 2;
  settings.value_block = 64;
  TurboQuantBlockCache cache(settings);
  cache.update_and_fetch(offset_kv(3, 40, 64, 81), offset_kv(3, 40, 64, 82));
  EXPECT_EQ(cache.bytes_per_row(), (32 + 4) + (24 + 2));  // value_block 64: one scale per value row
  ASSERT_EQ(cache.state().size(), 8u);
  TurboQuantBlockCache restored(8, 1, 1, 0);
  restored.from_state(cache.state(), cache.meta_state());
  EXPECT_EQ(restored.meta_state(), cache.meta_state());
  EXPECT_EQ(restored.nbytes() <= cache.nbytes(), true);
  // levels travels in the meta (before the means' entry, then key_mean_segment, key_split,
  // scale_format, key_split_rank, value_mean, sink_values, sink_format); a state saved before the
  // last four existed (15 entries) restores with their defaults, one saved before the split
  // existed (13 entries) without one, one
  // saved before segments existed (12) one mean, one saved before levels existed (11) also
  // Lloyd-Max levels; an unknown name is refused.
  std::vector<std::string> meta = cache.meta_state();
  ASSERT_EQ(meta.size(), 19u);
  EXPECT_EQ(meta[10], "lloyd");
  EXPECT_EQ(meta[13], "-");
  EXPECT_EQ(meta[14], "f16");
  EXPECT_EQ(std::vector<std::string>(meta.begin() + 15, meta.end()),
            (std::vector<std::string>{"product", "1", "1", "f16"}));
  TurboQuantBlockCache::Settings uniform_settings = settings;
  uniform_settings.levels = quant::BlockLloydQuantizer::Levels::kUniform;
  TurboQuantBlockCache uniform(uniform_settings);
  uniform.update_and_fetch(offset_kv(3, 40, 64, 81), offset_kv(3, 40, 64, 82));
  TurboQuantBlockCache uniform_restored(8, 1, 1, 0);
  uniform_restored.from_state(uniform.state(), uniform.meta_state());
  EXPECT_EQ(uniform_restored.meta_state()[10], "uniform");
  EXPECT_TRUE(uniform_restored.key_quantizer().even_levels());
  EXPECT_NE(uniform.update_and_fetch(k2_probe(), v2_probe()).keys.to_f32(),
            cache.clone()->update_and_fetch(k2_probe(), v2_probe()).keys.to_f32());
  const std::vector<std::string> before_options(meta.begin(), meta.begin() + 15);
  const std::vector<std::string> before_split(meta.begin(), meta.begin() + 13);
  const std::vector<std::string> before_segments(meta.begin(), meta.begin() + 12);
  TurboQuantBlockCache from_old(8, 1, 1, 0);
  from_old.from_state(cache.state(), before_options);
  EXPECT_EQ(from_old.meta_state(), cache.meta_state());
  from_old.from_state(cache.state(), before_split);
  EXPECT_EQ(from_old.meta_state(), cache.meta_state());
  from_old.from_state(cache.state(), before_segments);
  EXPECT_EQ(from_old.meta_state(), cache.meta_state());
  std::vector<std::string> old_meta = before_segments;
  old_meta.erase(old_meta.begin() + 10);
  from_old.from_state(cache.state(), old_meta);
  EXPECT_EQ(from_old.meta_state(), cache.meta_state());
  meta[10] = "linear";
  EXPECT_THROW(from_old.from_state(cache.state(), meta), base::FormatError);
  const lm::Tensor k2 = offset_kv(3, 3, 64, 83), v2 = offset_kv(3, 3, 64, 84);
  const lm::KeysValues a = cache.update_and_fetch(k2, v2), b = restored.update_and_fetch(k2, v2);
  EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
  EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
  // A clone is independent.
  auto copy = cache.clone();
  cache.trim(5);
  EXPECT_EQ(copy->offset(), 43);
}

// Brute-force causal attention over fetched rows (double softmax): the reference for the fused
// path. keys/values [1, H, T, D] f32; queries [1, Hq, n, D] at positions first..first+n-1.
std::vector<float> brute_attention(const lm::KeysValues& kv, const std::vector<float>& q, int64_t hq, int64_t n,
                                   int64_t first, float scale) {
  const int64_t h = kv.keys.dim(1), t = kv.keys.dim(2), d = kv.keys.dim(3);
  const std::vector<float> k = kv.keys.to_f32(), v = kv.values.to_f32();
  std::vector<float> out(static_cast<std::size_t>(hq * n * d), 0.0f);
  for (int64_t qh = 0; qh < hq; ++qh) {
    const int64_t kh = qh / (hq / h);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t visible = std::min(t, first + i + 1);
      std::vector<double> w(static_cast<std::size_t>(visible));
      double top = -INFINITY, sum = 0.0;
      for (int64_t j = 0; j < visible; ++j) {
        double dot = 0.0;
        for (int64_t e = 0; e < d; ++e)
          dot += double(q[static_cast<std::size_t>((qh * n + i) * d + e)]) *
                 k[static_cast<std::size_t>((kh * t + j) * d + e)];
        w[static_cast<std::size_t>(j)] = dot * scale;
        top = std::max(top, w[static_cast<std::size_t>(j)]);
      }
      for (double& x : w) sum += (x = std::exp(x - top));
      for (int64_t j = 0; j < visible; ++j)
        for (int64_t e = 0; e < d; ++e)
          out[static_cast<std::size_t>((qh * n + i) * d + e)] += static_cast<float>(
              w[static_cast<std::size_t>(j)] / sum * v[static_cast<std::size_t>((kh * t + j) * d + e)]);
    }
  }
  return out;
}

TEST(TurboQuantBlockCache, FusedAttentionWithMeansAndSinksEqualsAttentionOverFetchedRows) {
  // The driver path (turboquant_block_rows.h) reads rows in the rotated basis with the rotated
  // means added and the sinks rotated from f16: the same rows update_and_fetch returns, so the
  // outputs agree to f32 rounding and the keys' 16-bit scoring (block_level_key_scores.h). GQA:
  // 4 query heads over 2 kv heads; prefill then decode, every chunk of one sequence (one offset:
  // a fresh offset per chunk would put later keys ~8 sigma from the calibrated mean, dot products
  // in the hundreds, where the scoring's ~2e-5 relative rounding alone reaches the tolerance).
  // levels=uniform (and 4-bit values: the nibble path) reads codes without a table and must
  // agree the same way.
  using Levels = quant::BlockLloydQuantizer::Levels;
  for (const auto& [key_bits, value_bits, levels] :
       {std::tuple{3, 4, Levels::kLloyd}, std::tuple{3, 4, Levels::kUniform}, std::tuple{4, 4, Levels::kUniform},
        std::tuple{5, 3, Levels::kUniform}}) {
    TurboQuantBlockCache::Settings settings{64, key_bits, value_bits, 12};
    settings.mean_rows = 32;
    settings.sink_rows = 2;
    settings.levels = levels;
    TurboQuantBlockCache fused(settings), plain(settings);
    int64_t first = 0;
    uint64_t seed = 500;
    for (int64_t n : {90, 3, 1}) {
      const lm::Tensor k = offset_kv(2, n, 64, seed++, 7001), v = offset_kv(2, n, 64, seed++, 7002);
      const lm::Tensor q = gaussian_kv(4, n, 64, seed++).contiguous();
      lm::Tensor out({1, 4, n, 64}, lm::DType::F32);
      const float scale = 0.125f;
      fused.fused_attention({&q, &k, &v, scale, std::nullopt}, out);
      const std::vector<float> want = brute_attention(plain.update_and_fetch(k, v), q.to_f32(), 4, n, first, scale);
      const std::vector<float> got = out.to_f32();
      double worst = 0.0;
      for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, double(std::fabs(got[i] - want[i])));
      EXPECT_LE(worst, 2e-3) << "chunk of " << n << ", K" << key_bits << " V" << value_bits << " "
                             << quant::block_levels_name(levels);
      first += n;
    }
  }
}

// The scores of turboquant_block's 8-bit key path (attention/byte_level_key_scores.h) for query
// q (model basis) against every row of kv head h, modelled from the stored codes: the rotated
// query rounded to int8 on one step (max |q| / 127), the Lloyd levels rounded to int8 on theirs
// (max |level| / 127), each block's integer sum times its f16 scale, a key mean as the bias
// <Pi q, Pi mu>, sink rows exact from the fetched keys. The roundings are written in the
// kernel's float steps (a value on a tie must round as it does); the sums are exact in double.
std::vector<double> byte_key_model_scores(const TurboQuantBlockCache& c, const lm::KeysValues& kv, const float* q,
                                          int64_t h) {
  const int64_t t = kv.keys.dim(2), d = c.head_dim(), block = c.key_quantizer().block_size();
  const int bits = c.key_bits();
  const std::vector<float> keys = kv.keys.to_f32();
  std::vector<float> rq(static_cast<std::size_t>(d));
  c.key_rotation().forward(q, rq.data());
  const auto rounded = [](const float* x, int64_t n, std::vector<int>& out) {
    float max_abs = 0.0f;
    for (int64_t i = 0; i < n; ++i) max_abs = std::max(max_abs, std::fabs(x[i]));
    const float inverse = 127.0f / max_abs;
    out.resize(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = static_cast<int>(std::lrintf(x[i] * inverse));
    return max_abs / 127.0f;
  };
  std::vector<int> q8, level8;
  const double step = double(rounded(rq.data(), d, q8)) *
                      double(rounded(c.key_quantizer().levels().data(), int64_t{1} << bits, level8));
  std::vector<double> scores(static_cast<std::size_t>(t));
  for (int64_t j = 0; j < t; ++j) {
    double score = 0.0;
    if (j < c.sink_rows_held()) {
      for (int64_t e = 0; e < d; ++e) score += double(q[e]) * keys[static_cast<std::size_t>((h * t + j) * d + e)];
    } else {
      const uint8_t* codes = c.key_codes(0, h, j);
      const uint16_t* block_scales = c.key_scales(0, h, j);
      for (int64_t b = 0; b < d / block; ++b) {
        int64_t total = 0;
        for (int64_t e = b * block; e < (b + 1) * block; ++e) {
          int code = 0;
          for (int k = 0; k < bits; ++k) code |= ((codes[(e * bits + k) / 8] >> ((e * bits + k) % 8)) & 1) << k;
          total += int64_t{q8[static_cast<std::size_t>(e)]} * level8[static_cast<std::size_t>(code)];
        }
        score += step * double(total) * base::f16_to_f32(block_scales[b]);
      }
      if (const uint16_t* mu = c.key_mean(0, h, j)) {
        for (int64_t e = 0; e < d; ++e) score += double(rq[static_cast<std::size_t>(e)]) * base::f16_to_f32(mu[e]);
      }
    }
    scores[static_cast<std::size_t>(j)] = score;
  }
  return scores;
}

// Attention of one query over the fetched values of kv head h with the given scores (double
// softmax), into out[0..Dv).
void attend_scores(const std::vector<double>& scores, const lm::KeysValues& kv, int64_t h, float scale, float* out) {
  const int64_t t = kv.values.dim(2), dv = kv.values.dim(3);
  const std::vector<float> v = kv.values.to_f32();
  double top = -INFINITY, sum = 0.0;
  for (double s : scores) top = std::max(top, s * scale);
  std::vector<double> w(scores.size()), o(static_cast<std::size_t>(dv), 0.0);
  for (std::size_t j = 0; j < w.size(); ++j) sum += (w[j] = std::exp(scores[j] * scale - top));
  for (int64_t j = 0; j < t; ++j)
    for (int64_t e = 0; e < dv; ++e)
      o[static_cast<std::size_t>(e)] +=
          w[static_cast<std::size_t>(j)] / sum * v[static_cast<std::size_t>((h * t + j) * dv + e)];
  for (int64_t e = 0; e < dv; ++e) out[e] = static_cast<float>(o[static_cast<std::size_t>(e)]);
}

// One cache shape (smoothed or not, kv_heads / q_heads GQA, key bits) over five calls: prefill
// chunks within 5e-4 of brute force, decode steps within 2e-4 of attention over the byte scorer's
// integer model (1e-2 of brute force where there is no byte loop).
void check_byte_key_decode(bool smoothed, int64_t kv_heads, int64_t q_heads, int key_bits) {
  TurboQuantBlockCache::Settings settings{64, key_bits, 3, 31};
  if (smoothed) {
    settings.mean_rows = 32;
    settings.key_mean_segment = 24;
    settings.sink_rows = 2;
  }
  TurboQuantBlockCache fused(settings), plain(settings);
  const bool byte_keys = attention::kernels::can_score_byte_level_rows(key_bits, 64, 32);
  int64_t first = 0;
  uint64_t seed = 700;
  for (int64_t n : {70, 1, 1, 3, 1}) {
    const lm::Tensor k = smoothed ? offset_kv(kv_heads, n, 64, seed++, 7003) : gaussian_kv(kv_heads, n, 64, seed++);
    const lm::Tensor v = gaussian_kv(kv_heads, n, 64, seed++);
    const lm::Tensor q = gaussian_kv(q_heads, n, 64, seed++).contiguous();
    lm::Tensor out({1, q_heads, n, 64}, lm::DType::F32);
    fused.fused_attention({&q, &k, &v, 0.125f, std::nullopt}, out);
    const lm::KeysValues kv = plain.update_and_fetch(k, v);
    const std::vector<float> qf = q.to_f32();
    std::vector<float> want = brute_attention(kv, qf, q_heads, n, first, 0.125f);
    double tolerance = n == 1 ? 1e-2 : 5e-4;  // n == 1 without byte keys: 16-bit rounding
    if (byte_keys && n == 1) {
      for (int64_t qh = 0; qh < q_heads; ++qh) {
        const int64_t h = qh / (q_heads / kv_heads);
        attend_scores(byte_key_model_scores(fused, kv, qf.data() + qh * 64, h), kv, h, 0.125f, want.data() + qh * 64);
      }
      tolerance = 2e-4;
    }
    const std::vector<float> got = out.to_f32();
    double worst = 0.0;
    for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, double(std::fabs(got[i] - want[i])));
    EXPECT_LE(worst, tolerance) << (smoothed ? "means, sinks, " : "") << "GQA " << q_heads << "/" << kv_heads << ", K"
                                << key_bits << ", chunk of " << n;
    first += n;
  }
}

// q3's, q4's and q5's key widths (3-6-bit Lloyd keys, 3-bit values), with and without key means
// (segments) and sink rows, GQA 9 over 3 and 4 over 2. Prefill chunks (6-210 queries per kv head)
// decode their tiles and equal brute force over the fetched rows to f32 rounding (measured
// 1.1e-4). Decode steps (2-3 queries per kv head) read the codes by the 8-bit scorer (the 16-bit
// scorer where no SIMD byte loop exists, within its rounding of brute force, measured 4e-3),
// which equals attention over its integer model (byte_key_model_scores) to f32 rounding (5e-5)
// but brute force only to the 8-bit rounding: with these keys (one channel 8x the others, scores
// ~260 at scale 0.125, softmax nearly one-hot) its score errors of up to ~4 move the outputs by
// up to 0.85 — the same rounding the kernel test bounds per score, no fault of the decode path.
// The model is what pins the path: the 16-bit or f32 scores miss it by that much.
TEST(TurboQuantBlockCache, ByteKeyDecodeStepsEqualTheirIntegerModel) {
  struct Gqa {
    int64_t kv_heads, q_heads;
  };
  for (const bool smoothed : {false, true}) {
    for (const Gqa g : {Gqa{3, 9}, Gqa{2, 4}}) {
      for (const int key_bits : {3, 4, 5, 6}) {
        check_byte_key_decode(smoothed, g.kv_heads, g.q_heads, key_bits);
      }
    }
  }
}

TEST(TurboQuantBlockCache, TrimEqualsAFreshCacheFedTheKeptTokens) {
  TurboQuantBlockCache cache(64, 4, 4, 5), fresh(64, 4, 4, 5);
  const lm::Tensor k = gaussian_kv(3, 30, 64, 41), v = gaussian_kv(3, 30, 64, 42);
  cache.update_and_fetch(k, v);
  EXPECT_EQ(cache.trim(12), 12);
  EXPECT_EQ(cache.offset(), 18);
  fresh.update_and_fetch(k.slice(2, 0, 18).contiguous(), v.slice(2, 0, 18).contiguous());
  const lm::Tensor k2 = gaussian_kv(3, 4, 64, 43), v2 = gaussian_kv(3, 4, 64, 44);
  const lm::KeysValues a = cache.update_and_fetch(k2, v2), b = fresh.update_and_fetch(k2, v2);
  EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
  EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
  EXPECT_EQ(cache.trim(1000), 22);
  EXPECT_TRUE(cache.empty());
  EXPECT_THROW(cache.trim(-1), base::InvalidArgument);
}

// Keys that drift: the shared offset turns slowly with position (as post-RoPE keys' offsets do),
// so a mean calibrated on the first rows fits later rows less and less.
lm::Tensor drifting_kv(int64_t heads, int64_t tokens, int64_t dim, uint64_t seed, int64_t first = 0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(heads * tokens * dim));
  for (int64_t hh = 0; hh < heads; ++hh) {
    for (int64_t t = 0; t < tokens; ++t) {
      const double angle = 0.004 * static_cast<double>(first + t);
      for (int64_t e = 0; e < dim; e += 2) {
        const double a = 6.0 + e * 0.05, c = std::cos(angle * (1 + e % 3)), sn = std::sin(angle * (1 + e % 3));
        float* row = x.data() + (hh * tokens + t) * dim;
        row[e] = static_cast<float>(a * c) + 0.5f * normal(rng);
        row[e + 1] = static_cast<float>(a * sn) + 0.5f * normal(rng);
      }
    }
  }
  return lm::Tensor::from_f32(x, {1, heads, tokens, dim}, lm::DType::F32);
}

TEST(TurboQuantBlockCache, KeyMeanSegmentsFollowTheDecodedPreviousSegment) {
  // Independent reference: segment 0 = rows [0, 1 + L) uses the calibrated mean (rows 1..mean_rows
  // of the first call), segment j >= 1 = rows [1 + jL, 1 + (j+1)L) the f16 mean of segment j-1's
  // decoded rotated keys (rows from 1 on). Rebuilt here with core::Rotation and the quantizer.
  const int d = 64;
  const int64_t seed = 17, L = 40, heads = 2, n = 150;
  TurboQuantBlockCache::Settings settings{d, 3, 3, seed};
  settings.mean_rows = 32;
  settings.key_mean_segment = static_cast<int>(L);
  TurboQuantBlockCache cache(settings);
  const lm::Tensor k = drifting_kv(heads, n, d, 5), v = gaussian_kv(heads, n, d, 6);
  // Three calls that cut segments in the middle: 70 rows, 1 row (a decode step), 79 rows.
  std::vector<float> got;
  int64_t at = 0;
  for (int64_t len : {70, 1, 79}) {
    const lm::KeysValues kv =
        cache.update_and_fetch(k.slice(2, at, at + len).contiguous(), v.slice(2, at, at + len).contiguous());
    got = kv.keys.to_f32();
    at += len;
  }
  const core::Rotation rot(d, static_cast<uint64_t>(seed));
  const quant::BlockLloydQuantizer q(3);
  const std::vector<float> kf = k.to_f32();
  std::vector<float> rotated(d), decoded(d), back(d);
  std::vector<uint8_t> packed(64);
  std::vector<uint16_t> scales(2);
  for (int64_t hh = 0; hh < heads; ++hh) {
    // Calibrated mean: rows 1..32 of the first call, rotated, rounded to f16.
    std::vector<float> mu(d, 0.0f);
    for (int e = 0; e < d; ++e) {
      double sum = 0.0;
      for (int64_t t = 1; t <= 32; ++t) sum += kf[static_cast<std::size_t>((hh * n + t) * d + e)];
      mu[e] = static_cast<float>(sum / 32.0);
    }
    rot.forward(mu.data(), mu.data());
    for (float& m : mu) m = base::f16_to_f32(base::f32_to_f16(m));
    std::vector<double> segment_sum(d, 0.0);
    int64_t segment_rows = 0;
    for (int64_t r = 0; r < n; ++r) {
      if (r > 1 && (r - 1) % L == 0) {  // a new segment: the previous one's decoded mean
        for (int e = 0; e < d; ++e)
          mu[e] = base::f16_to_f32(base::f32_to_f16(static_cast<float>(segment_sum[e] / segment_rows + mu[e])));
        std::fill(segment_sum.begin(), segment_sum.end(), 0.0);
        segment_rows = 0;
      }
      rot.forward(kf.data() + (hh * n + r) * d, rotated.data());
      for (int e = 0; e < d; ++e) rotated[e] -= mu[e];
      q.encode_row(rotated.data(), d, packed.data(), scales.data());
      q.decode_row(packed.data(), scales.data(), d, decoded.data());
      if (r >= 1) {
        for (int e = 0; e < d; ++e) segment_sum[e] += decoded[e];
        ++segment_rows;
      }
      for (int e = 0; e < d; ++e) decoded[e] += mu[e];
      rot.inverse(decoded.data(), back.data());
      for (int e = 0; e < d; ++e) {
        ASSERT_NEAR(got[static_cast<std::size_t>((hh * n + r) * d + e)], back[e], 1e-4f)
            << "head " << hh << " row " << r;
      }
    }
  }
  // Bytes: one f16 key-mean row per segment of the allocated rows (256 rows: segments 0..6).
  TurboQuantBlockCache::Settings plain = settings;
  plain.key_mean_segment = 0;
  TurboQuantBlockCache one_mean(plain);
  one_mean.update_and_fetch(k, v);
  EXPECT_EQ(cache.nbytes(), one_mean.nbytes() + std::size_t(heads * 6 * d * 2));
}

TEST(TurboQuantBlockCache, KeyMeanSegmentsLowerTheErrorOfDriftingKeys) {
  TurboQuantBlockCache::Settings settings{64, 3, 3, 4};
  settings.mean_rows = 64;
  TurboQuantBlockCache::Settings segmented = settings;
  segmented.key_mean_segment = 64;
  const lm::Tensor k = drifting_kv(2, 600, 64, 7), v = gaussian_kv(2, 600, 64, 8);
  TurboQuantBlockCache a(settings), b(segmented);
  const double err_one = relative_error(a.update_and_fetch(k, v).keys, k);
  const double err_segments = relative_error(b.update_and_fetch(k, v).keys, k);
  EXPECT_LT(err_segments * 2, err_one) << err_one << " vs " << err_segments;
}

TEST(TurboQuantBlockCache, KeyMeanSegmentsSurviveStateTrimAndFusedAttention) {
  TurboQuantBlockCache::Settings settings{64, 4, 3, 21};
  settings.mean_rows = 16;
  settings.sink_rows = 1;
  settings.key_mean_segment = 32;
  TurboQuantBlockCache cache(settings), fresh(settings);
  const lm::Tensor k = drifting_kv(3, 120, 64, 11), v = gaussian_kv(3, 120, 64, 12);
  cache.update_and_fetch(k, v);
  // State round trip: the segment means travel with the codes (4 segments for 120 rows).
  TurboQuantBlockCache restored(8, 1, 1, 0);
  const std::vector<lm::Tensor> state = cache.state();
  ASSERT_EQ(state.size(), 8u);
  EXPECT_EQ(state[4].dim(2), 4);
  restored.from_state(state, cache.meta_state());
  EXPECT_EQ(restored.meta_state(), cache.meta_state());
  const lm::Tensor k2 = drifting_kv(3, 20, 64, 13, 120), v2 = gaussian_kv(3, 20, 64, 14);
  const lm::KeysValues a = cache.update_and_fetch(k2, v2), b = restored.update_and_fetch(k2, v2);
  EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
  EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
  // Trim into a segment, then new rows: the same as a fresh cache fed the kept rows.
  cache.trim(140 - 70);
  fresh.update_and_fetch(k.slice(2, 0, 70).contiguous(), v.slice(2, 0, 70).contiguous());
  const lm::Tensor k3 = drifting_kv(3, 50, 64, 15, 70), v3 = gaussian_kv(3, 50, 64, 16);
  const lm::KeysValues c = cache.update_and_fetch(k3, v3), f = fresh.update_and_fetch(k3, v3);
  EXPECT_EQ(c.keys.to_f32(), f.keys.to_f32());
  // Fused attention (prefill tile decode and decode steps from codes) over segments equals
  // brute-force attention over the fetched rows, with Lloyd-Max and with evenly spaced levels
  // (whose keys are scored without a level table). Decode steps score 4-bit Lloyd keys as 8-bit
  // integers: against their integer model (byte_key_model_scores), one bias per segment.
  for (const auto levels : {quant::BlockLloydQuantizer::Levels::kLloyd, quant::BlockLloydQuantizer::Levels::kUniform}) {
    settings.levels = levels;
    TurboQuantBlockCache fused(settings), plain(settings);
    const bool byte_keys = levels == quant::BlockLloydQuantizer::Levels::kLloyd &&
                           attention::kernels::can_score_byte_level_rows(4, 64, 32);
    int64_t first = 0;
    uint64_t seed = 900;
    for (int64_t len : {100, 1, 1, 40}) {
      const lm::Tensor kk = drifting_kv(3, len, 64, seed++, first), vv = gaussian_kv(3, len, 64, seed++);
      const lm::Tensor q = gaussian_kv(9, len, 64, seed++).contiguous();
      lm::Tensor out({1, 9, len, 64}, lm::DType::F32);
      fused.fused_attention({&q, &kk, &vv, 0.02f, std::nullopt}, out);
      const lm::KeysValues kv = plain.update_and_fetch(kk, vv);
      const std::vector<float> qf = q.to_f32();
      std::vector<float> want = brute_attention(kv, qf, 9, len, first, 0.02f);
      if (byte_keys && len == 1) {
        for (int64_t qh = 0; qh < 9; ++qh)
          attend_scores(byte_key_model_scores(fused, kv, qf.data() + qh * 64, qh / 3), kv, qh / 3, 0.02f,
                        want.data() + qh * 64);
      }
      const std::vector<float> got = out.to_f32();
      double worst = 0.0;
      for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, double(std::fabs(got[i] - want[i])));
      EXPECT_LE(worst, byte_keys && len == 1 ? 2e-4 : 2e-3)
          << "chunk of " << len << (levels == quant::BlockLloydQuantizer::Levels::kUniform ? " (uniform)" : "");
      first += len;
    }
  }
  // key_mean_segment needs mean_rows, and is never negative; errors name the field.
  TurboQuantBlockCache::Settings bad = settings;
  bad.mean_rows = 0;
  try {
    TurboQuantBlockCache broken(bad);
    FAIL() << "accepted key_mean_segment without mean_rows";
  } catch (const QuantizerConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("key_mean_segment"), std::string::npos) << e.what();
  }
  bad = settings;
  bad.key_mean_segment = -1;
  EXPECT_THROW(TurboQuantBlockCache broken(bad), QuantizerConfigError);
}

TEST(TurboQuantBlockCache, BitWidthsAreValidatedWithTheirNames) {
  auto expect_error = [](const KVCacheConfig& c, const std::string& needle) {
    try {
      KVCacheBuilder(c).build();
      FAIL() << "accepted " << needle;
    } catch (const QuantizerConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  KVCacheConfig c;
  c.method = "turboquant_block";
  c.head_dim = 64;
  c.turboquant_block.key_bits = 9;
  expect_error(c, "9");
  c.turboquant_block.key_bits = 4;
  c.turboquant_block.value_bits = -2;
  expect_error(c, "-2");
  c.turboquant_block.value_bits = 0;  // follows bit_width_inlier
  c.bit_width_inlier = 12;
  expect_error(c, "12");
  EXPECT_THROW(TurboQuantBlockCache(64, 0, 4, 1), QuantizerConfigError);
  c.turboquant_block.value_block = 48;
  c.turboquant_block.value_bits = 3;
  expect_error(c, "48");
  c.turboquant_block.value_block = 32;
  // key_bits / value_bits set: --bits is not read.
  c.turboquant_block.value_bits = 3;
  c.bit_width_inlier = 2;
  auto cache = std::dynamic_pointer_cast<TurboQuantBlockCache>(KVCacheBuilder(c).build().serving());
  ASSERT_TRUE(cache);
  EXPECT_EQ(cache->key_bits(), 4);
  EXPECT_EQ(cache->value_bits(), 3);
}

}  // namespace
}  // namespace veloxquant
