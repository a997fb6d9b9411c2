// xkv against references written from its card (docs/methods/xkv.md): the group's basis is held
// to what the SVD of the stacked, centred prefill keys must give (the mean, orthonormal
// eigen-directions of the scatter matrix in descending order, the energy-rule rank), computed
// here by brute force; given that basis, every complete block of G keys is z = V (k - mean), each
// latent channel KIVI's group code over the block's tokens, k = mean + sum z_i V_i. The sharing is
// checked on the objects: both members of a group hold the same basis, it is fitted once and
// counted once; group size 1 is a per-layer SVD; a trailing partial group works alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "lm/cache/prompt_cache_file.h"
#include "support/allocation_counter.h"
#include "support/fake_model.h"
#include "support/fused_vs_fetched.h"
#include "support/group_code_reference.h"
#include "support/kv_test_data.h"
#include "support/option_error.h"
#include "veloxquant/cross_layer/segment_coordinator.h"
#include "veloxquant/cross_layer/xkv_cache.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

using cache_rows::row_ptr;

// Keys of rank `rank` plus small noise, around a non-zero mean (so the centring matters).
lm::Tensor low_rank_keys(int64_t heads, int64_t t, int64_t d, int64_t rank, uint64_t seed) {
  const std::vector<float> dirs = test_support::random_kv(1, heads, rank, d, seed, lm::DType::F32).to_f32();
  const std::vector<float> coef = test_support::random_kv(1, heads, t, rank, seed + 1, lm::DType::F32).to_f32();
  const std::vector<float> noise = test_support::random_kv(1, heads, t, d, seed + 2, lm::DType::F32).to_f32();
  std::vector<float> x(static_cast<std::size_t>(heads * t * d));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = 0; r < t; ++r) {
      for (int64_t c = 0; c < d; ++c) {
        double v =
            0.3 + 0.05 * static_cast<double>(c % 5) + 0.003 * noise[static_cast<std::size_t>((h * t + r) * d + c)];
        for (int64_t k = 0; k < rank; ++k) {
          v += coef[static_cast<std::size_t>((h * t + r) * rank + k)] / double(1 + k) *
               dirs[static_cast<std::size_t>((h * rank + k) * d + c)] / 4.0;
        }
        x[static_cast<std::size_t>((h * t + r) * d + c)] = static_cast<float>(v);
      }
    }
  }
  return lm::Tensor::from_f32(x, {1, heads, t, d}, lm::DType::F32);
}

XkvOptions options(std::optional<int> rank = std::nullopt, int bits = 4, int group = 8, double energy = 0.95) {
  XkvOptions o;
  o.xkv_rank = rank;
  o.xkv_latent_bits = bits;
  o.xkv_group_quant_size = group;
  o.xkv_energy_threshold = energy;
  return o;
}

// Head h's rows of several [1, H, S_m, D] f32 key tensors, stacked.
std::vector<double> stacked_head(const std::vector<lm::Tensor>& members, int64_t h) {
  std::vector<double> out;
  for (const lm::Tensor& m : members) {
    const std::vector<float> all = m.to_f32();
    const int64_t s = m.dim(2), d = m.dim(3);
    for (int64_t i = 0; i < s * d; ++i) out.push_back(all[static_cast<std::size_t>(h * s * d + i)]);
  }
  return out;
}

// The basis, checked against the brute-force scatter matrix of the stacked, centred keys.
void expect_basis_of(const XkvBasis& basis, const std::vector<lm::Tensor>& members, double energy) {
  const int64_t heads = members[0].dim(1), d = members[0].dim(3);
  for (int64_t h = 0; h < heads; ++h) {
    const std::vector<double> x = stacked_head(members, h);
    const int64_t n = static_cast<int64_t>(x.size()) / d;
    std::vector<double> mean(static_cast<std::size_t>(d), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t c = 0; c < d; ++c) mean[c] += x[i * d + c] / static_cast<double>(n);
    }
    std::vector<double> scatter(static_cast<std::size_t>(d * d), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t a = 0; a < d; ++a) {
        for (int64_t b = 0; b < d; ++b) scatter[a * d + b] += (x[i * d + a] - mean[a]) * (x[i * d + b] - mean[b]);
      }
    }
    double trace = 0.0;
    for (int64_t a = 0; a < d; ++a) trace += scatter[a * d + a];
    const float* stored_mean = row_ptr<float>(basis.table, 0, h, 0);
    for (int64_t c = 0; c < d; ++c) EXPECT_NEAR(stored_mean[c], mean[c], 1e-5) << "mean h " << h << " c " << c;
    const int64_t rank = row_ptr<int32_t>(basis.ranks, 0, h, 0)[0];
    ASSERT_GE(rank, 1);
    ASSERT_LE(rank, basis.coded);
    std::vector<double> lambda;
    for (int64_t i = 0; i < basis.coded; ++i) {
      const float* v = row_ptr<float>(basis.table, 0, h, 1 + i);
      double norm = 0.0;
      for (int64_t c = 0; c < d; ++c) norm += double(v[c]) * v[c];
      if (i >= rank) {
        EXPECT_EQ(norm, 0.0) << "directions past the head's rank are zero";
        continue;
      }
      EXPECT_NEAR(norm, 1.0, 1e-5);
      // An eigenvector of the scatter matrix: |C v - (v' C v) v| small against the spectrum.
      std::vector<double> cv(static_cast<std::size_t>(d), 0.0);
      for (int64_t a = 0; a < d; ++a) {
        for (int64_t b = 0; b < d; ++b) cv[a] += scatter[a * d + b] * v[b];
      }
      double l = 0.0;
      for (int64_t a = 0; a < d; ++a) l += cv[a] * v[a];
      double residual = 0.0;
      for (int64_t a = 0; a < d; ++a) residual += (cv[a] - l * v[a]) * (cv[a] - l * v[a]);
      EXPECT_LE(std::sqrt(residual), 1e-3 * trace) << "direction " << i;
      if (!lambda.empty()) {
        EXPECT_LE(l, lambda.back() * (1 + 1e-6) + 1e-9) << "descending";
      }
      lambda.push_back(l);
      for (int64_t j = 0; j < i; ++j) {
        const float* u = row_ptr<float>(basis.table, 0, h, 1 + j);
        double dot = 0.0;
        for (int64_t c = 0; c < d; ++c) dot += double(u[c]) * v[c];
        EXPECT_NEAR(dot, 0.0, 1e-5);
      }
    }
    // The energy rule: the smallest rank holding `energy` of the centred energy.
    double kept = 0.0;
    for (int64_t i = 0; i + 1 < rank; ++i) kept += lambda[static_cast<std::size_t>(i)];
    EXPECT_LT(kept, energy * trace * (1 + 1e-6));
    kept += lambda[static_cast<std::size_t>(rank - 1)];
    EXPECT_GE(kept, energy * trace * (1 - 1e-6));
  }
}

// What the cache must return for the keys it was fed (all calls concatenated, f32 [H, T, D]),
// given its basis: complete blocks of G coded, the rest exact.
std::vector<float> reference_keys(const XkvCache& cache, const std::vector<float>& keys, int64_t heads, int64_t t,
                                  int64_t d, int group, int bits) {
  const XkvBasis& basis = *cache.basis();
  const int64_t coded = basis.coded, frontier = t / group * group;
  std::vector<float> out = keys;
  for (int64_t h = 0; h < heads; ++h) {
    const float* mean = row_ptr<float>(basis.table, 0, h, 0);
    for (int64_t block = 0; block < frontier / group; ++block) {
      std::vector<std::vector<float>> z(static_cast<std::size_t>(coded));
      for (int64_t i = 0; i < coded; ++i) {
        const float* v = row_ptr<float>(basis.table, 0, h, 1 + i);
        for (int64_t r = block * group; r < (block + 1) * group; ++r) {
          double dot = 0.0;
          for (int64_t c = 0; c < d; ++c) dot += double(v[c]) * (keys[(h * t + r) * d + c] - mean[c]);
          z[i].push_back(static_cast<float>(dot));
        }
        // A channel past the head's rank is 0 on every row: its f16 scale underflows to 0 and
        // every code decodes to the min (the reference's division would give 0 / 0).
        const bool flat = *std::max_element(z[i].begin(), z[i].end()) == *std::min_element(z[i].begin(), z[i].end());
        if (!flat) z[i] = test_support::reference_group(z[i], bits);
        if (flat) std::fill(z[i].begin(), z[i].end(), test_support::f16_round(z[i][0]));
      }
      for (int64_t r = 0; r < group; ++r) {
        float* k = out.data() + (h * t + block * group + r) * d;
        for (int64_t c = 0; c < d; ++c) {
          double x = mean[c];
          for (int64_t i = 0; i < coded; ++i) x += double(z[i][r]) * row_ptr<float>(basis.table, 0, h, 1 + i)[c];
          k[c] = static_cast<float>(x);
        }
      }
    }
  }
  return out;
}

TEST(XkvCache, RolesAreContiguousGroupsWithASmallerTrailingGroup) {
  const std::vector<XkvRole> five = xkv_roles(5, 2);
  const int want[5][3] = {{0, 0, 2}, {0, 1, 2}, {1, 0, 2}, {1, 1, 2}, {2, 0, 1}};
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(five[k].group_id, want[k][0]);
    EXPECT_EQ(five[k].member, want[k][1]);
    EXPECT_EQ(five[k].n_members, want[k][2]);
  }
  const std::vector<XkvRole> seven = xkv_roles(7, 3);
  EXPECT_EQ(seven[6].group_id, 2);
  EXPECT_EQ(seven[6].n_members, 1);
  EXPECT_EQ(seven[4].member, 1);
  EXPECT_EQ(seven[4].n_members, 3);
  for (const XkvRole& r : xkv_roles(4, 1)) EXPECT_EQ(r.n_members, 1);
}

TEST(XkvCache, OneJointSvdSharedByBothMembersAndCountedOnce) {
  const int64_t heads = 2, d = 16, s = 40;
  const XkvOptions o = options(std::nullopt, 4, 8, 0.9);
  auto coordinator = std::make_shared<XkvCoordinator>(8192, "xkv_max_ctx", o.xkv_rank, o.xkv_energy_threshold);
  XkvCache m0(o, {0, 0, 2}, coordinator), m1(o, {0, 1, 2}, coordinator);
  const lm::Tensor k0 = low_rank_keys(heads, s, d, 4, 10), k1 = low_rank_keys(heads, s, d, 4, 20);
  const lm::Tensor v = test_support::random_kv(1, heads, s, d, 30, lm::DType::F32);
  // Layer order: member 0's prefill, then member 1's; member 0 can only learn the basis later.
  m0.update_and_fetch(k0, v);
  EXPECT_FALSE(m0.basis());
  EXPECT_EQ(m0.frontier(), 0);
  EXPECT_EQ(coordinator->live_tokens(0), s);  // charged on member 0's publish
  m1.update_and_fetch(k1, v);
  ASSERT_TRUE(m1.basis());
  EXPECT_EQ(coordinator->fits(), 1);
  EXPECT_EQ(coordinator->live_tokens(0), 0);  // consumed by the SVD
  EXPECT_EQ(m1.frontier(), 40);
  const lm::Tensor step = low_rank_keys(heads, 1, d, 4, 40);
  const lm::Tensor vstep = test_support::random_kv(1, heads, 1, d, 41, lm::DType::F32);
  m0.update_and_fetch(step, vstep);
  ASSERT_TRUE(m0.basis());
  EXPECT_EQ(m0.basis().get(), m1.basis().get()) << "one object, not two copies";
  EXPECT_EQ(coordinator->fits(), 1);
  EXPECT_EQ(m0.frontier(), 40);
  EXPECT_TRUE(m1.counts_basis());
  EXPECT_FALSE(m0.counts_basis());
  expect_basis_of(*m1.basis(), {k0, k1}, 0.9);
  // Each member's own parts are the same size; the basis is counted once, by the fitter.
  EXPECT_EQ(m1.nbytes() - m1.basis()->nbytes(), m0.nbytes());
}

TEST(XkvCache, MembersMatchTheReferenceGivenTheSharedBasis) {
  const int64_t heads = 2, d = 16;
  for (const XkvOptions& o : {options(std::nullopt, 4, 8), options(3, 2, 8), options(16, 8, 5)}) {
    auto coordinator = std::make_shared<XkvCoordinator>(8192, "xkv_max_ctx", o.xkv_rank, o.xkv_energy_threshold);
    XkvCache m0(o, {0, 0, 2}, coordinator), m1(o, {0, 1, 2}, coordinator);
    std::vector<lm::Tensor> keys0, keys1, vals;
    for (int64_t n : {37, 1, 1, 12, 3}) {
      const uint64_t seed = static_cast<uint64_t>(100 + keys0.size() * 10);
      keys0.push_back(low_rank_keys(heads, n, d, 4, seed));
      keys1.push_back(low_rank_keys(heads, n, d, 4, seed + 5));
      vals.push_back(test_support::random_kv(1, heads, n, d, seed + 7, lm::DType::F32));
    }
    lm::KeysValues got0, got1;
    for (std::size_t c = 0; c < keys0.size(); ++c) {
      got0 = m0.update_and_fetch(keys0[c], vals[c]);
      got1 = m1.update_and_fetch(keys1[c], vals[c]);
    }
    const int64_t t = 54;
    const auto a0 = test_support::concat_tokens_f32(keys0), a1 = test_support::concat_tokens_f32(keys1);
    const auto want0 = reference_keys(m0, a0, heads, t, d, o.xkv_group_quant_size, o.xkv_latent_bits);
    const auto want1 = reference_keys(m1, a1, heads, t, d, o.xkv_group_quant_size, o.xkv_latent_bits);
    const auto g0 = got0.keys.to_f32(), g1 = got1.keys.to_f32();
    ASSERT_EQ(g0.size(), want0.size());
    for (std::size_t i = 0; i < g0.size(); ++i) {
      ASSERT_NEAR(g0[i], want0[i], 2e-5) << "member 0 element " << i;
      ASSERT_NEAR(g1[i], want1[i], 2e-5) << "member 1 element " << i;
    }
    EXPECT_EQ(got0.values.to_f32(), test_support::concat_tokens_f32(vals)) << "values exact";
    if (o.xkv_rank) {
      EXPECT_EQ(m0.basis()->coded, std::min<int64_t>(*o.xkv_rank, d));
    }
  }
}

TEST(XkvCache, GroupSizeOneIsAPerLayerSvd) {
  test_support::FakeModel model;  // 2 attention layers, 1 kv head, head_dim 4
  KVCacheConfig c;
  c.method = "xkv";
  c.options<XkvOptions>().xkv_group_size = 1;
  c.options<XkvOptions>().xkv_group_quant_size = 4;
  const lm::CacheList caches = KVCacheBuilder::for_model(model, c);
  ASSERT_EQ(caches.size(), 2u);
  auto l0 = std::dynamic_pointer_cast<XkvCache>(caches[0]), l1 = std::dynamic_pointer_cast<XkvCache>(caches[1]);
  ASSERT_TRUE(l0 && l1);
  const lm::Tensor k0 = low_rank_keys(1, 12, 4, 2, 50), k1 = low_rank_keys(1, 12, 4, 2, 60);
  l0->update_and_fetch(k0, k0);
  l1->update_and_fetch(k1, k1);
  ASSERT_TRUE(l0->basis() && l1->basis());
  EXPECT_NE(l0->basis().get(), l1->basis().get());
  EXPECT_TRUE(l0->counts_basis() && l1->counts_basis());
  // Each is exactly the basis a cache fitting alone on the same keys finds.
  XkvCache alone(c.options<XkvOptions>());
  alone.update_and_fetch(k1, k1);
  EXPECT_EQ(alone.basis()->table.to_f32(), l1->basis()->table.to_f32());
  expect_basis_of(*l0->basis(), {k0}, 0.95);
}

TEST(XkvCache, ForModelSharesOneBasisPerGroupAndATrailingMemberFitsAlone) {
  test_support::FakeModel model;
  KVCacheConfig c;
  c.method = "xkv";
  c.options<XkvOptions>().xkv_group_quant_size = 4;
  const lm::CacheList caches = KVCacheBuilder::for_model(model, c);
  auto l0 = std::dynamic_pointer_cast<XkvCache>(caches[0]), l1 = std::dynamic_pointer_cast<XkvCache>(caches[1]);
  ASSERT_TRUE(l0 && l1);
  EXPECT_EQ(l0->role().n_members, 2);
  const lm::Tensor a = low_rank_keys(1, 10, 4, 2, 70), b = low_rank_keys(1, 1, 4, 2, 71);
  for (const auto& cache : caches) cache->update_and_fetch(a, a);
  for (const auto& cache : caches) cache->update_and_fetch(b, b);
  EXPECT_EQ(l0->basis().get(), l1->basis().get());
  // A trailing group of one (5 layers, groups of 2): its member fits at its first call.
  auto coordinator = std::make_shared<XkvCoordinator>(8192, "xkv_max_ctx", std::nullopt, 0.95);
  XkvCache last(options(), xkv_roles(5, 2)[4], coordinator);
  last.update_and_fetch(a, a);
  EXPECT_TRUE(last.basis());
  EXPECT_TRUE(last.counts_basis());
  EXPECT_EQ(coordinator->fits(), 1);
}

TEST(XkvCache, BytesAreExactAndReallyAllocated) {
  const int64_t h = 3, d = 64, s = 100;
  const lm::Tensor k = low_rank_keys(h, s, d, 6, 80).astype(lm::DType::F16);
  const lm::Tensor v = test_support::random_kv(1, h, s, d, 81, lm::DType::F16);
  const auto before = test_support::allocation_snapshot();
  XkvCache cache(options(std::nullopt, 4, 32));
  cache.update_and_fetch(k, v);
  const auto after = test_support::allocation_snapshot();
  EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes), cache.nbytes());
  // 100 f16 tokens: 96 coded in a 256-row region (8 blocks), 4 pending in a 32-row f16 buffer,
  // every value f16 in 256 rows; codes ceil(coded * 4 / 8) bytes per row (groups of 8), params
  // f16 (scale, min) per coded channel and block; the f32 table (mean + coded rows) and a rank.
  const std::size_t coded = static_cast<std::size_t>(cache.basis()->coded);
  std::size_t row_bytes = 0;
  for (std::size_t f = 0; f < coded; f += 8) row_bytes += (std::min<std::size_t>(8, coded - f) * 4 + 7) / 8;
  EXPECT_EQ(cache.nbytes(), h * (256 * row_bytes + 8 * coded * 4 + 256 * d * 2 + 32 * d * 2 + (1 + coded) * d * 4 + 4));
}

TEST(XkvCache, FusedAttentionEqualsAttentionOverFetchedRows) {
  const int64_t heads = 2, hq = 6, d = 64;
  const test_support::RowMaker rank8 = [](int64_t h, int64_t n, int64_t dim, uint64_t s) {
    return low_rank_keys(h, n, dim, 8, s);
  };
  for (const XkvOptions& o : {options(std::nullopt, 4, 32), options(5, 2, 16)}) {
    XkvCache fused(o), plain(o);
    const std::vector<int64_t> chunks{70, 1, 1, 40, 1};
    const std::vector<float> worst = test_support::fused_vs_fetched(fused, plain, heads, hq, d, chunks, 900, rank8);
    // Not float rounding alone: the latent codes score as integers against the projected query
    // rounded to 16 bits per block (attention/narrow_plane_scores.h), which moves these outputs
    // by up to ~6e-4 (1e-4 held for the f32 decode).
    for (std::size_t c = 0; c < chunks.size(); ++c) EXPECT_LE(worst[c], 1e-3f) << "chunk " << chunks[c];
  }
}

TEST(XkvCache, StateRoundTripContinuesExactly) {
  integration::register_prompt_cache_types();
  const int64_t heads = 2, d = 16;
  auto coordinator = std::make_shared<XkvCoordinator>(8192, "xkv_max_ctx", std::nullopt, 0.95);
  XkvCache m0(options(), {0, 0, 2}, coordinator), m1(options(), {0, 1, 2}, coordinator);
  const lm::Tensor k = low_rank_keys(heads, 21, d, 3, 90);
  m0.update_and_fetch(k, k);
  m1.update_and_fetch(k, k);
  for (XkvCache* cache : {&m0, &m1}) {  // m0 still waits for its basis; m1 holds it
    auto back = std::dynamic_pointer_cast<XkvCache>(lm::make_cache_of_type(cache->type_name()));
    ASSERT_TRUE(back);
    back->from_state(cache->state(), cache->meta_state());
    EXPECT_EQ(back->offset(), cache->offset());
    EXPECT_EQ(back->frontier(), cache->frontier());
    EXPECT_EQ(back->role().member, cache->role().member);
    const lm::Tensor more = low_rank_keys(heads, 12, d, 3, 91);
    if (cache == &m1) {
      const lm::KeysValues want = cache->update_and_fetch(more, more);
      const lm::KeysValues got = back->update_and_fetch(more, more);
      EXPECT_EQ(got.keys.to_f32(), want.keys.to_f32());
      EXPECT_EQ(got.values.to_f32(), want.values.to_f32());
      EXPECT_TRUE(back->counts_basis());
      EXPECT_EQ(back->nbytes(), cache->nbytes());
    } else {
      // Restored alone, the waiting member fits its own basis on its next call.
      back->update_and_fetch(more, more);
      EXPECT_TRUE(back->basis());
      EXPECT_EQ(back->frontier(), 32);
    }
  }
  auto empty = lm::make_cache_of_type("XkvCache");
  empty->from_state(XkvCache(options()).state(), XkvCache(options()).meta_state());
  EXPECT_TRUE(empty->empty());
  EXPECT_THROW(empty->from_state({}, {"2"}), base::FormatError);
}

TEST(XkvCache, MaxCtxNamesTheOptionToRaise) {
  test_support::FakeModel model;
  KVCacheConfig c;
  c.method = "xkv";
  c.options<XkvOptions>().xkv_max_ctx = 8;
  const lm::CacheList caches = KVCacheBuilder::for_model(model, c);
  const lm::Tensor kv = test_support::random_kv(1, 1, 12, 4, 6, lm::DType::F32);
  try {
    caches[0]->update_and_fetch(kv, kv);
    FAIL() << "12 prefill tokens > xkv_max_ctx 8";
  } catch (const cross_layer::CrossLayerCapacityError& e) {
    EXPECT_NE(std::string(e.what()).find("xkv_max_ctx"), std::string::npos) << e.what();
  }
}

TEST(XkvCache, BadOptionsNameTheField) {
  const auto message = [](const std::function<void(XkvOptions&)>& change) {
    return test_support::option_error("xkv", change);
  };
  EXPECT_NE(message([](XkvOptions& o) { o.xkv_group_size = 0; }).find("xkv_group_size"), std::string::npos);
  EXPECT_EQ(message([](XkvOptions& o) { o.xkv_group_size = 1; }), "accepted");
  EXPECT_NE(message([](XkvOptions& o) { o.xkv_rank = 0; }).find("xkv_rank"), std::string::npos);
  EXPECT_NE(message([](XkvOptions& o) { o.xkv_energy_threshold = 0; }).find("xkv_energy_threshold"), std::string::npos);
  EXPECT_NE(message([](XkvOptions& o) { o.xkv_energy_threshold = 1.5; }).find("xkv_energy_threshold"),
            std::string::npos);
  EXPECT_NE(message([](XkvOptions& o) { o.xkv_latent_bits = 9; }).find("xkv_latent_bits"), std::string::npos);
  EXPECT_NE(message([](XkvOptions& o) { o.xkv_latent_bits = 0; }).find("xkv_latent_bits"), std::string::npos);
  EXPECT_NE(message([](XkvOptions& o) { o.xkv_group_quant_size = 0; }).find("xkv_group_quant_size"), std::string::npos);
  EXPECT_NE(message([](XkvOptions& o) { o.xkv_max_ctx = 0; }).find("xkv_max_ctx"), std::string::npos);
}

}  // namespace
}  // namespace veloxquant
