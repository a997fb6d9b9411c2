// kvquant against an independent reference written from its card (docs/methods/kvquant.md):
// first kvquant_n_sink positions exact and neutralized in their key group; per key group block,
// round(fraction * G * D) outliers by distance from their quantization group's (lower) median in
// MADs, replaced by that median; KIVI's f16 (scale, min) per group; levels fitted by Lloyd on the
// normalized coordinates of the first flush, starting from 0..2^b-1; outliers restored by an f32
// correction.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/error.h"
#include "base/half.h"
#include "support/allocation_counter.h"
#include "support/group_code_reference.h"
#include "support/kv_test_data.h"
#include "support/option_error.h"
#include "support/reference_attention.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

using test_support::f16_round;

float lower_median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

struct Params {
  float scale, min;
};

Params group_params(const std::vector<float>& x, int bits) {
  const float lo = f16_round(*std::min_element(x.begin(), x.end()));
  const float hi = *std::max_element(x.begin(), x.end());
  return {f16_round(std::max((hi - lo) / float((1 << bits) - 1), 1e-8f)), lo};
}

int nearest(float u, const std::vector<float>& levels) {
  int code = 0;
  for (std::size_t i = 0; i + 1 < levels.size(); ++i) code += u > 0.5f * (levels[i] + levels[i + 1]) ? 1 : 0;
  return code;
}

std::vector<float> lloyd(const std::vector<float>& u, int n_levels, int iterations) {
  std::vector<float> levels(static_cast<std::size_t>(n_levels));
  std::iota(levels.begin(), levels.end(), 0.0f);
  for (int it = 0; it < iterations; ++it) {
    std::vector<double> sum(levels.size(), 0.0);
    std::vector<int> count(levels.size(), 0);
    for (float x : u) {
      const int c = nearest(x, levels);
      sum[c] += x;
      ++count[c];
    }
    for (std::size_t c = 0; c < levels.size(); ++c) {
      if (count[c] > 0) levels[c] = static_cast<float>(sum[c] / count[c]);
    }
  }
  return levels;
}

// One head's rows [tokens, d] (tokens a multiple of group), quantized as one first flush.
struct HeadReference {
  std::vector<float> keys, values;
};

// Quantization groups of a block as lists of element indices: keys one channel over the block's
// rows, values `group` channels of one row.
std::vector<std::vector<int64_t>> groups_of(int64_t rows, int64_t d, int64_t group, bool per_channel) {
  std::vector<std::vector<int64_t>> out;
  if (per_channel) {
    for (int64_t c = 0; c < d; ++c) {
      out.emplace_back();
      for (int64_t r = 0; r < rows; ++r) out.back().push_back(r * d + c);
    }
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c0 = 0; c0 < d; c0 += group) {
        out.emplace_back();
        for (int64_t c = c0; c < std::min(d, c0 + group); ++c) out.back().push_back(r * d + c);
      }
    }
  }
  return out;
}

HeadReference reference_head(std::vector<float> k, std::vector<float> v, int64_t tokens, int64_t d, int bits,
                             int64_t group, double fraction, int iters, int64_t n_sink) {
  const std::vector<float> exact_k = k, exact_v = v;
  // Sinks: positions < n_sink, each replaced by the nearest non-sink row of its group.
  for (int64_t s = 0; s < std::min(n_sink, tokens); ++s) {
    const int64_t g0 = s / group * group;
    for (int64_t j = s + 1; j < g0 + group; ++j) {
      if (j >= n_sink) {
        std::copy_n(exact_k.begin() + j * d, d, k.begin() + s * d);
        std::copy_n(exact_v.begin() + j * d, d, v.begin() + s * d);
        break;
      }
    }
  }
  const int64_t blocks = tokens / group;
  const int n_levels = 1 << bits;
  // Outliers per block, then the groups' params.
  struct Outlier {
    int64_t element;
    float exact;
  };
  std::vector<Outlier> outliers[2];
  std::vector<Params> params[2];  // per group, in the order groups_of lists them, block by block
  std::vector<float>* data[2] = {&k, &v};
  for (int which = 0; which < 2; ++which) {
    std::vector<float>& x = *data[which];
    const int64_t kk = std::llround(fraction * double(group * d));
    for (int64_t blk = 0; blk < blocks; ++blk) {
      float* base = x.data() + blk * group * d;
      std::vector<float> z(static_cast<std::size_t>(group * d)), center(z.size());
      for (const auto& members : groups_of(group, d, group, which == 0)) {
        std::vector<float> vals, devs;
        for (int64_t e : members) vals.push_back(base[e]);
        const float med = lower_median(vals);
        for (int64_t e : members) devs.push_back(std::fabs(base[e] - med));
        const float mad = lower_median(devs);
        for (int64_t e : members) {
          center[e] = med;
          const float dev = std::fabs(base[e] - med);
          z[e] = mad > 0 ? dev / mad : (dev > 0 ? INFINITY : 0.0f);
        }
      }
      std::vector<int64_t> order(z.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        const bool sa = blk * group + a / d < n_sink, sb = blk * group + b / d < n_sink;  // sink rows last
        if (sa != sb) return !sa;
        return z[a] > z[b];
      });
      order.resize(static_cast<std::size_t>(kk));
      std::sort(order.begin(), order.end());
      for (int64_t e : order) {
        outliers[which].push_back({blk * group * d + e, base[e]});
        base[e] = center[e];
      }
      for (const auto& members : groups_of(group, d, group, which == 0)) {
        std::vector<float> vals;
        vals.reserve(members.size());
        for (int64_t e : members) vals.push_back(base[e]);
        params[which].push_back(group_params(vals, bits));
      }
    }
  }
  // Levels from the normalized coordinates (keys by block, channel, token; values by token, group).
  HeadReference ref;
  std::vector<float>* out[2] = {&ref.keys, &ref.values};
  for (int which = 0; which < 2; ++which) {
    std::vector<float>& x = *data[which];
    std::vector<float> u;
    std::size_t p = 0;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      for (const auto& members : groups_of(group, d, group, which == 0)) {
        const Params gp = params[which][p++];
        for (int64_t e : members) {
          u.push_back(std::clamp((x[blk * group * d + e] - gp.min) / gp.scale, 0.0f, float(n_levels - 1)));
        }
      }
    }
    const std::vector<float> levels = iters > 0 ? lloyd(u, n_levels, iters) : std::vector<float>{};
    std::vector<float>& o = *out[which];
    o = x;
    p = 0;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      for (const auto& members : groups_of(group, d, group, which == 0)) {
        const Params gp = params[which][p++];
        for (int64_t e : members) {
          float& y = o[blk * group * d + e];
          const float uu = (y - gp.min) / gp.scale;
          const float level =
              iters > 0 ? levels[nearest(uu, levels)] : std::clamp(std::nearbyint(uu), 0.0f, float(n_levels - 1));
          y = level * gp.scale + gp.min;
        }
      }
    }
    for (const Outlier& ol : outliers[which]) o[ol.element] += ol.exact - o[ol.element];
    const std::vector<float>& exact = which == 0 ? exact_k : exact_v;
    for (int64_t s = 0; s < std::min(n_sink, tokens); ++s) std::copy_n(exact.begin() + s * d, d, o.begin() + s * d);
  }
  return ref;
}

KiviVariant kvquant_variant(double fraction, int iters, int n_sink) {
  KiviVariant v;
  v.type_name = "KVQuantCache";
  v.sinks = SinkRule::kFirstPositions;
  v.sink_slots = n_sink;
  v.outlier_fraction = fraction;
  v.lloyd_iters = iters;
  return v;
}

TEST(KVQuantCache, MatchesTheReferenceBitExactly) {
  const int64_t heads = 2, t = 24, d = 16, group = 8;
  for (const auto& [bits, fraction, iters, n_sink] :
       {std::tuple{3, 0.05, 8, 1}, std::tuple{2, 0.02, 3, 2}, std::tuple{4, 0.0, 0, 0}, std::tuple{3, 0.1, 0, 9}}) {
    const lm::Tensor k = test_support::random_kv(1, heads, t, d, 51, lm::DType::F32);
    const lm::Tensor v = test_support::random_kv(1, heads, t, d, 52, lm::DType::F32);
    KiviCache cache(d, bits, group, 0, kvquant_variant(fraction, iters, n_sink));
    const lm::KeysValues got = cache.update_and_fetch(k, v);
    const std::vector<float> gk = got.keys.to_f32(), gv = got.values.to_f32(), kf = k.to_f32(), vf = v.to_f32();
    for (int64_t h = 0; h < heads; ++h) {
      const HeadReference ref = reference_head({kf.begin() + h * t * d, kf.begin() + (h + 1) * t * d},
                                               {vf.begin() + h * t * d, vf.begin() + (h + 1) * t * d}, t, d, bits,
                                               group, fraction, iters, n_sink);
      EXPECT_EQ(std::vector<float>(gk.begin() + h * t * d, gk.begin() + (h + 1) * t * d), ref.keys)
          << "bits " << bits << " fraction " << fraction << " head " << h;
      EXPECT_EQ(std::vector<float>(gv.begin() + h * t * d, gv.begin() + (h + 1) * t * d), ref.values)
          << "bits " << bits << " fraction " << fraction << " head " << h;
    }
  }
}

TEST(KVQuantCache, FittedLevelsAndOutliersLowerTheError) {
  // Heavy-tailed keys (a few large values per channel): the outliers and levels must each help.
  const int64_t t = 256, d = 64;
  std::vector<float> x = test_support::random_kv(1, 1, t, d, 61, lm::DType::F32).to_f32();
  for (std::size_t i = 0; i < x.size(); i += 97) x[i] *= 12.0f;
  const lm::Tensor k = lm::Tensor::from_f32(x, {1, 1, t, d}, lm::DType::F32);
  const auto error = [&](const KiviVariant& variant) {
    KiviCache cache(d, 3, 32, 0, variant);
    const std::vector<float> got = cache.update_and_fetch(k, k).keys.to_f32();
    double e = 0;
    for (std::size_t i = 0; i < x.size(); ++i) e += double(got[i] - x[i]) * (got[i] - x[i]);
    return e / double(x.size());
  };
  const double uniform = error(kvquant_variant(0.0, 0, 0));
  const double levels = error(kvquant_variant(0.0, 8, 0));
  const double both = error(kvquant_variant(0.01, 8, 0));
  EXPECT_LT(levels, uniform);
  EXPECT_LT(both * 2, levels) << uniform << " " << levels << " " << both;
}

TEST(KVQuantCache, BytesAreTheLayoutAndReallyAllocated) {
  const int64_t b = 1, h = 2, d = 64;
  const auto before = test_support::allocation_snapshot();
  KVCacheConfig c;
  c.method = "kvquant";
  c.head_dim = d;
  auto cache = KVCacheBuilder(c).build().serving();  // defaults: 3 bits, 1%, G 32, 1 sink
  for (int i = 0; i < 3; ++i) {
    cache->update_and_fetch(test_support::random_kv(b, h, 100, d, i), test_support::random_kv(b, h, 100, d, i + 9));
  }
  const auto after = test_support::allocation_snapshot();
  EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes), cache->nbytes());
  // 300 tokens: 288 quantized (9 groups) in a 512-row region, 12 in the tail of 0 + 32 rows.
  const std::size_t rows = 512, heads = b * h, groups = rows / 32;
  const std::size_t codes = 2 * heads * rows * (d / 10 + 1) * 4;  // 3-bit: 10 codes per u32, 7 words
  const std::size_t params = heads * groups * 2 * d * 2 + heads * rows * 2 * 2 * 2;
  const std::size_t tail = 2 * heads * 32 * d * 2;
  const std::size_t outliers = 2 * heads * groups * 20 * (4 + 4);  // round(0.01 * 32 * 64) = 20, u32 + f32
  const std::size_t sinks = b * 1 * 4 + 2 * heads * 1 * d * 2;
  const std::size_t levels = heads * 2 * 8 * 4;
  EXPECT_EQ(cache->nbytes(), codes + params + tail + outliers + sinks + levels);
}

TEST(KVQuantCache, OutliersAndTheSinkComeBackExactly) {
  const int64_t d = 32, t = 64;
  std::vector<float> x = test_support::random_kv(1, 1, t, d, 71, lm::DType::F32).to_f32();
  x[5 * d + 3] = 300.0f;  // an outlier far outside its channel
  x[40 * d + 17] = -250.0f;
  const lm::Tensor k = lm::Tensor::from_f32(x, {1, 1, t, d}, lm::DType::F32);
  KiviCache cache(d, 3, 32, 0, kvquant_variant(0.01, 8, 1));
  const std::vector<float> got = cache.update_and_fetch(k, k).keys.to_f32();
  EXPECT_NEAR(got[5 * d + 3], 300.0f, 1e-4f);
  EXPECT_NEAR(got[40 * d + 17], -250.0f, 1e-4f);
  for (int64_t c = 0; c < d; ++c) EXPECT_EQ(got[c], x[c]);  // position 0: the sink
}

TEST(KVQuantCache, TrimAndStateKeepTheLevels) {
  KVCacheConfig c;
  c.method = "kvquant";
  c.head_dim = 16;
  auto cache = KVCacheBuilder(c).build().serving();
  cache->update_and_fetch(test_support::random_kv(1, 2, 100, 16, 81), test_support::random_kv(1, 2, 100, 16, 82));
  auto restored = require_method("kvquant").make_restorable();
  restored->from_state(cache->state(), cache->meta_state());
  EXPECT_EQ(restored->type_name(), "KVQuantCache");
  for (auto* c2 : {cache.get(), restored.get()}) EXPECT_EQ(c2->trim(30), 30);  // frontier 96 -> 64
  const lm::Tensor k = test_support::random_kv(1, 2, 40, 16, 83), v = test_support::random_kv(1, 2, 40, 16, 84);
  const lm::KeysValues a = cache->update_and_fetch(k, v);
  const lm::KeysValues b = restored->update_and_fetch(k, v);
  EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
  EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
  // Trimmed to empty, the next flush fits its levels again: equal to a fresh cache.
  cache->trim(1000);
  auto fresh = KVCacheBuilder(c).build().serving();
  EXPECT_EQ(cache->update_and_fetch(k, v).keys.to_f32(), fresh->update_and_fetch(k, v).keys.to_f32());
}

TEST(KVQuantCache, FusedAttentionReadsLevelsOutliersAndSinks) {
  // 2-bit codes at D = 64 read by planes, 3 and 5 bits by word planes (levels from registers and
  // by a gather), GQA 3, a prefill then decode steps; heavy-tailed keys so that every block has
  // outliers far from the codes. f32 rows: the fused path and the fetched rows then differ by
  // summation order only.
  const int64_t heads = 2, hq = 6, d = 64;
  for (int bits : {2, 3, 5}) {
    KiviCache fused(d, bits, 32, 0, kvquant_variant(0.01, 8, 1)), plain(d, bits, 32, 0, kvquant_variant(0.01, 8, 1));
    int64_t first = 0;
    uint64_t seed = 300;
    for (int64_t n : {150, 17, 1, 1}) {
      std::vector<float> kx = test_support::random_kv(1, heads, n, d, seed++, lm::DType::F32).to_f32();
      for (std::size_t i = 0; i < kx.size(); i += 53) kx[i] *= 15.0f;
      const lm::Tensor k = lm::Tensor::from_f32(kx, {1, heads, n, d}, lm::DType::F32);
      const lm::Tensor v = test_support::random_kv(1, heads, n, d, seed++, lm::DType::F32);
      const lm::Tensor q = test_support::random_kv(1, hq, n, d, seed++, lm::DType::F32);
      lm::Tensor out({1, hq, n, d}, lm::DType::F32);
      const float scale = 0.125f;
      fused.fused_attention({&q, &k, &v, scale, std::nullopt}, out);
      const std::vector<float> want =
          test_support::reference_attention(plain.update_and_fetch(k, v), q.to_f32(), hq, n, first, scale);
      const std::vector<float> got = out.to_f32();
      float worst = 0;
      for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
      EXPECT_LE(worst, 1e-3f) << "bits " << bits << " chunk " << n;
      first += n;
    }
  }
}

TEST(KVQuantCache, BadOptionsNameTheField) {
  const auto message = [](const std::function<void(KVQuantOptions&)>& change) {
    return test_support::option_error("kvquant", change);
  };
  EXPECT_NE(message([](KVQuantOptions& o) { o.kvquant_bits = 9; }).find("kvquant_bits"), std::string::npos);
  EXPECT_NE(message([](KVQuantOptions& o) { o.kvquant_outlier_fraction = 0.7; }).find("kvquant_outlier_fraction"),
            std::string::npos);
  EXPECT_NE(message([](KVQuantOptions& o) { o.kvquant_group_size = 0; }).find("kvquant_group_size"), std::string::npos);
  EXPECT_NE(message([](KVQuantOptions& o) { o.kvquant_n_sink = -1; }).find("kvquant_n_sink"), std::string::npos);
  EXPECT_NE(message([](KVQuantOptions& o) { o.kvquant_lloyd_iters = -2; }).find("kvquant_lloyd_iters"),
            std::string::npos);
  KVCacheConfig c;
  c.method = "kvquant";
  c.head_dim = 16;
  c.options<KVQuantOptions>().kvquant_refit_interval = 64;
  try {
    KVCacheBuilder(c).build();
    FAIL() << "refit accepted";
  } catch (const base::Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("kvquant_refit_interval"), std::string::npos);
  }
}

}  // namespace
}  // namespace veloxquant
