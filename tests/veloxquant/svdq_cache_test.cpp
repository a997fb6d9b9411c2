// svdq against a reference written from its card (docs/methods/svdq.md): given the cache's latent
// basis, every complete block of G keys is projected on it (z = B k, in double), each coded latent
// channel gets KIVI's group code over the block's tokens at its group's width, and the key comes
// back as sum_i z'_i B_i; values and the incomplete block come back as given. The basis itself is
// held to what an SVD basis must be: orthonormal, ordered by the energy it captures, spanning
// low-rank keys with the rank the energy threshold asks for.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "support/allocation_counter.h"
#include "support/group_code_reference.h"
#include "support/fused_vs_fetched.h"
#include "support/kv_test_data.h"
#include "support/option_error.h"
#include "support/reference_attention.h"
#include "veloxquant/caches/svdq_cache.h"
#include "lm/kernels/attention_tiles.h"
#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/caches/svdq_latent_decode.h"
#include "veloxquant/caches/svdq_latent_scores.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

using test_support::reference_group;

SvdqOptions options(const std::string& schedule, std::optional<int> rank, int group = 32, double energy = 0.95) {
  SvdqOptions o;
  o.svdq_bit_schedule = schedule;
  o.svdq_rank = rank;
  o.svdq_group_size = group;
  o.svdq_energy_threshold = energy;
  return o;
}

// Keys of rank `rank` plus a little noise: x_t = sum_r a_tr u_r (u_r fixed random directions,
// a_tr shrinking with r) + 0.01 noise — the spectrum real keys show, in miniature.
lm::Tensor low_rank_keys(int64_t heads, int64_t t, int64_t d, int64_t rank, uint64_t seed) {
  const std::vector<float> dirs = test_support::random_kv(1, heads, rank, d, seed, lm::DType::F32).to_f32();
  const std::vector<float> coef = test_support::random_kv(1, heads, t, rank, seed + 1, lm::DType::F32).to_f32();
  const std::vector<float> noise = test_support::random_kv(1, heads, t, d, seed + 2, lm::DType::F32).to_f32();
  std::vector<float> x(static_cast<std::size_t>(heads * t * d));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = 0; r < t; ++r) {
      for (int64_t c = 0; c < d; ++c) {
        double v = 0.0025 * noise[static_cast<std::size_t>((h * t + r) * d + c)];
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

TEST(Svdq, LayoutFollowsTheSchedule) {
  const SvdqLayout def = make_svdq_layout(64, parse_svdq_schedule("8,4,2,1,1,0,0,0"));
  EXPECT_EQ(def.coded, 40);
  EXPECT_EQ(def.row_bytes, 8 + 4 + 2 + 1 + 1);
  ASSERT_EQ(def.groups.size(), 5u);
  EXPECT_EQ(def.groups[2].first, 16);
  EXPECT_EQ(def.groups[2].byte_offset, 12);
  // D = 20: channel c in group floor(8c / 20) -> groups of 3, 2, 3, 2, 3, 2, 3, 2 channels.
  const SvdqLayout odd = make_svdq_layout(20, parse_svdq_schedule("3,0,5,0,1,1,0,2"));
  EXPECT_EQ(odd.coded, 3 + 3 + 3 + 2 + 2);
  EXPECT_EQ(odd.latent_of, (std::vector<int64_t>{0, 1, 2, 5, 6, 7, 10, 11, 12, 13, 14, 18, 19}));
  EXPECT_EQ(odd.row_bytes, 2 + 2 + 1 + 1 + 1);  // ceil(9/8), ceil(15/8), ceil(3/8), ceil(2/8), ceil(4/8)
}

TEST(Svdq, LatentTileDecodeMatchesTheScalarLoop) {
  // The dispatched kernel (one vector per 8-channel group at 1, 2, 4, 8 bits) against the scalar
  // loop, on random code bytes: every width, groups of 8 and of other sizes, a stride wider than
  // a row.
  for (const auto& [d, schedule] :
       {std::pair{int64_t{64}, "8,4,2,1,1,0,0,0"}, std::pair{int64_t{64}, "1,2,4,8,3,5,6,7"},
        std::pair{int64_t{128}, "8,8,4,4,2,2,1,1"}, std::pair{int64_t{20}, "3,0,5,0,1,1,0,2"}}) {
    const SvdqLayout layout = make_svdq_layout(d, parse_svdq_schedule(schedule));
    const int64_t rows = 11, stride = layout.row_bytes + 3;
    std::vector<uint8_t> bytes(static_cast<std::size_t>(rows * stride));
    uint32_t state = 12345;
    for (uint8_t& x : bytes) x = static_cast<uint8_t>((state = state * 1664525u + 1013904223u) >> 24);
    std::vector<float> scale(static_cast<std::size_t>(layout.coded)), min(scale.size());
    for (std::size_t i = 0; i < scale.size(); ++i) {
      scale[i] = 0.01f * static_cast<float>(i + 1);
      min[i] = -0.5f + 0.03f * static_cast<float>(i);
    }
    std::vector<float> got(static_cast<std::size_t>(rows * layout.coded)), want(got.size());
    decode_latent_rows(layout, bytes.data(), stride, rows, scale.data(), min.data(), got.data());
    scalar::decode_latent_rows(layout, bytes.data(), stride, rows, scale.data(), min.data(), want.data());
    EXPECT_EQ(got, want) << schedule << " d " << d;
  }
}

TEST(Svdq, CodeScoresEqualDecodeThenScoreRows) {
  // score_latent_codes (fused on AVX-512 for groups of 8 channels) against decoding the rows and
  // scoring the f32 tile with the shared kernel, bit for bit: 1-4 queries (4 takes the two-pass
  // form), whole passes and remainders, packed rows and a wider odd stride (two loads per row
  // pair), query rows wider than the coded channels, layouts that fuse and that do not.
  for (const auto& [d, schedule] :
       {std::pair{int64_t{64}, "8,4,2,1,1,0,0,0"}, std::pair{int64_t{64}, "1,2,4,8,8,4,2,1"},
        std::pair{int64_t{64}, "8,8,8,0,0,4,0,2"}, std::pair{int64_t{64}, "1,2,4,8,3,5,6,7"},
        std::pair{int64_t{128}, "8,8,4,4,2,2,1,1"}, std::pair{int64_t{20}, "3,0,5,0,1,1,0,2"}}) {
    const SvdqLayout layout = make_svdq_layout(d, parse_svdq_schedule(schedule));
    for (const int64_t stride : {layout.row_bytes, layout.row_bytes + 3}) {
      for (const int64_t rows : {int64_t{8}, int64_t{13}, int64_t{64}, int64_t{5}}) {
        std::vector<uint8_t> bytes(static_cast<std::size_t>(rows * stride));
        uint32_t state = 777u + static_cast<uint32_t>(rows + stride);
        const auto next = [&] { return (state = state * 1664525u + 1013904223u) >> 8; };
        for (uint8_t& x : bytes) x = static_cast<uint8_t>(next());
        const auto uniform = [&] { return static_cast<float>(next() % 20001) / 10000.0f - 1.0f; };
        std::vector<float> scale(static_cast<std::size_t>(layout.coded)), min(scale.size());
        for (std::size_t i = 0; i < scale.size(); ++i) {
          scale[i] = 0.05f * (1.1f + uniform());
          min[i] = uniform();
        }
        for (int64_t nq = 1; nq <= 4; ++nq) {
          const int64_t q_stride = layout.coded + 1, ld = rows + 2;
          std::vector<float> q(static_cast<std::size_t>(nq * q_stride));
          for (float& x : q) x = uniform();
          std::vector<float> tile(static_cast<std::size_t>(rows * layout.coded));
          std::vector<float> want(static_cast<std::size_t>(nq * ld), -7.0f), got = want;
          decode_latent_rows(layout, bytes.data(), stride, rows, scale.data(), min.data(), tile.data());
          lm::kernels::tiles::score_rows(q.data(), q_stride, nq, tile.data(), layout.coded, rows, layout.coded,
                                         want.data(), ld);
          std::vector<float> scratch(tile.size());
          score_latent_codes({&layout, bytes.data(), stride, rows, scale.data(), min.data()}, q.data(), q_stride, nq,
                             got.data(), ld, scratch.data());
          EXPECT_EQ(got, want) << schedule << " d " << d << " stride " << stride << " rows " << rows << " nq " << nq;
        }
      }
    }
  }
  // On AVX-512 (this project's machine) the default layout takes the fused kernel, so the loop
  // above held it to the two-pass form.
  // veloxquant_lib's own dispatch (a sanitizer build may compile its kernels without AVX-512 while
  // lm keeps every target).
  if (std::string(attention::kernels::target_name()).rfind("AVX3", 0) == 0) {
    EXPECT_TRUE(latent_codes_fuse(make_svdq_layout(64, parse_svdq_schedule("8,4,2,1,1,0,0,0"))));
  }
  EXPECT_TRUE(!latent_codes_fuse(make_svdq_layout(128, parse_svdq_schedule("8,8,4,4,2,2,1,1"))));
  EXPECT_TRUE(!latent_codes_fuse(make_svdq_layout(64, parse_svdq_schedule("1,2,4,8,3,5,6,7"))));
}

// Rows [b0, b0 + g) of head h's keys (`want`, [t, d] floats, rewritten in place) as the
// reference codes them: each coded direction's latents over the block quantized as one group at
// its schedule entry's bits (zero past the head's rank), then the rows rebuilt from the directions.
void reference_block(const SvdqCache& cache, const std::vector<int>& schedule, int64_t h, int64_t d, int64_t g,
                     int64_t b0, std::vector<float>& want) {
  const SvdqLayout& layout = cache.layout();
  const int64_t rank = cache.rank(0, h);
  std::vector<std::vector<float>> z(static_cast<std::size_t>(layout.coded));
  for (int64_t i = 0; i < layout.coded; ++i) {
    const float* dir = cache.basis_row(0, h, i);
    for (int64_t r = b0; r < b0 + g; ++r) {
      double dot = 0;
      for (int64_t c = 0; c < d; ++c) dot += double(dir[c]) * want[static_cast<std::size_t>(r * d + c)];
      z[static_cast<std::size_t>(i)].push_back(static_cast<float>(dot));
    }
    const int64_t latent = layout.latent_of[static_cast<std::size_t>(i)];
    if (latent >= rank) {
      std::fill(z[static_cast<std::size_t>(i)].begin(), z[static_cast<std::size_t>(i)].end(), 0.0f);
    } else {
      z[static_cast<std::size_t>(i)] =
          reference_group(z[static_cast<std::size_t>(i)], schedule[static_cast<std::size_t>(latent * 8 / d)]);
    }
  }
  for (int64_t r = b0; r < b0 + g; ++r) {
    float* row = want.data() + r * d;
    std::fill(row, row + d, 0.0f);
    for (int64_t i = 0; i < layout.coded; ++i) {
      const float* dir = cache.basis_row(0, h, i);
      for (int64_t c = 0; c < d; ++c)
        row[c] += z[static_cast<std::size_t>(i)][static_cast<std::size_t>(r - b0)] * dir[c];
    }
  }
}

TEST(Svdq, MatchesTheReferenceGivenItsBasis) {
  const int64_t heads = 2;
  for (const auto& [o, d, chunks] :
       {std::tuple{options("8,4,2,1,1,0,0,0", std::nullopt), int64_t{64}, std::vector<int64_t>{70, 1, 30}},
        std::tuple{options("4,4,3,3,2,2,1,1", 16, 8), int64_t{32}, std::vector<int64_t>{5, 20, 1, 1, 9}},
        std::tuple{options("8,8,8,8,8,8,8,8", std::nullopt, 16, 0.5), int64_t{24}, std::vector<int64_t>{40}},
        std::tuple{options("3,0,5,0,1,1,0,2", 7, 4), int64_t{20}, std::vector<int64_t>{3, 3, 11}}}) {
    int64_t t = 0;
    for (int64_t n : chunks) t += n;
    const lm::Tensor k = low_rank_keys(heads, t, d, 6, 31);
    const lm::Tensor v = test_support::random_kv(1, heads, t, d, 32, lm::DType::F32);
    SvdqCache cache(o);
    int64_t fed = 0;
    lm::KeysValues got;
    for (int64_t n : chunks) {
      got =
          cache.update_and_fetch(test_support::token_rows(k, fed, fed + n), test_support::token_rows(v, fed, fed + n));
      fed += n;
    }
    EXPECT_EQ(got.values.to_f32(), v.to_f32()) << "values are kept as given";
    const std::vector<int> schedule = parse_svdq_schedule(o.svdq_bit_schedule);
    const std::vector<float> kf = k.to_f32(), gk = got.keys.to_f32();
    const int64_t g = o.svdq_group_size, frontier = t / g * g;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t rank = cache.rank(0, h);
      if (o.svdq_rank) {
        EXPECT_EQ(rank, std::min<int64_t>(*o.svdq_rank, d));
      }
      std::vector<float> want(kf.begin() + h * t * d, kf.begin() + (h + 1) * t * d);
      for (int64_t b0 = 0; b0 < frontier; b0 += g) reference_block(cache, schedule, h, d, g, b0, want);
      // The codes and the latent values are exact; the final sum over directions may be contracted
      // to fused multiply-adds on one side and not the other: one rounding apart, no more.
      float worst = 0;
      for (int64_t i = 0; i < t * d; ++i) {
        const float w = want[static_cast<std::size_t>(i)];
        worst = std::max(worst, std::fabs(gk[static_cast<std::size_t>(h * t * d + i)] - w) / (1.0f + std::fabs(w)));
      }
      EXPECT_LE(worst, 2e-7f) << "schedule " << o.svdq_bit_schedule << " d " << d << " head " << h;
    }
  }
}

TEST(Svdq, TheBasisIsOrthonormalAndFindsTheKeysRank) {
  const int64_t d = 64, t = 256;
  const lm::Tensor k = low_rank_keys(1, t, d, 6, 50);
  SvdqCache cache(options("8,8,8,8,8,8,8,8", std::nullopt, 32, 0.999));
  cache.update_and_fetch(k, k);
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < d; ++c) dot += double(cache.basis_row(0, 0, i)[c]) * cache.basis_row(0, 0, j)[c];
      if (i < cache.rank(0, 0)) {
        EXPECT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-5) << i << " " << j;
      }
    }
  }
  EXPECT_EQ(cache.rank(0, 0), 6) << "six directions hold all but the noise's share of the energy";
  // The latent energy falls with the channel index (descending singular values).
  const std::vector<float> x = k.to_f32();
  double previous = 1e30;
  for (int64_t i = 0; i < 6; ++i) {
    double energy = 0;
    for (int64_t r = 0; r < t; ++r) {
      double dot = 0;
      for (int64_t c = 0; c < d; ++c)
        dot += double(cache.basis_row(0, 0, i)[c]) * x[static_cast<std::size_t>(r * d + c)];
      energy += dot * dot;
    }
    EXPECT_LT(energy, previous) << "channel " << i;
    previous = energy;
  }
}

TEST(Svdq, LowRankKeysCostFarLessErrorThanKiviAtTheSameBits) {
  // 2 bits per element on average (the default schedule) against KIVI's 2-bit per-channel code of
  // the same blocks: on keys of rank 6 the latent code puts its bits where the energy is.
  const int64_t d = 64, t = 256, g = 32;
  const lm::Tensor k = low_rank_keys(1, t, d, 6, 60);
  // The energy threshold at 0.999 keeps the six directions (0.95 would drop the two weakest: 4% of
  // the energy, which then dominates the error — the method's default trade, not its coding).
  SvdqCache cache(options("8,4,2,1,1,0,0,0", std::nullopt, 32, 0.999));
  const std::vector<float> got = cache.update_and_fetch(k, k).keys.to_f32();
  const std::vector<float> x = k.to_f32();
  double err_svdq = 0, err_kivi = 0;
  for (int64_t b0 = 0; b0 < t; b0 += g) {
    for (int64_t c = 0; c < d; ++c) {
      std::vector<float> col;
      for (int64_t r = b0; r < b0 + g; ++r) col.push_back(x[static_cast<std::size_t>(r * d + c)]);
      const std::vector<float> q = reference_group(col, 2);
      for (int64_t r = b0; r < b0 + g; ++r) {
        const double e = x[static_cast<std::size_t>(r * d + c)];
        err_kivi += (q[static_cast<std::size_t>(r - b0)] - e) * (q[static_cast<std::size_t>(r - b0)] - e);
        err_svdq += (got[static_cast<std::size_t>(r * d + c)] - e) * (got[static_cast<std::size_t>(r * d + c)] - e);
      }
    }
  }
  std::printf("MSE svdq %.3g kivi-2 %.3g\n", err_svdq / double(t * d), err_kivi / double(t * d));
  EXPECT_LT(err_svdq * 10, err_kivi);
}

TEST(Svdq, BytesAreTheLayoutAndReallyAllocated) {
  const int64_t b = 1, h = 2, d = 64;
  const auto before = test_support::allocation_snapshot();
  KVCacheConfig c;
  c.method = "svdq";
  c.head_dim = d;
  auto cache = KVCacheBuilder(c).build().serving();
  for (int i = 0; i < 3; ++i) {
    cache->update_and_fetch(test_support::random_kv(b, h, 100, d, i), test_support::random_kv(b, h, 100, d, i + 9));
  }
  const auto after = test_support::allocation_snapshot();
  EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes), cache->nbytes());
  // 300 f16 tokens in a 512-row region (16 blocks): 16 code bytes per row, 40 (scale, min) pairs
  // per block, the 40 x 64 f32 basis and a rank per head, f16 values, a 32-row f16 key tail.
  const std::size_t heads = b * h, rows = 512, blocks = 16;
  EXPECT_EQ(cache->nbytes(),
            heads * (rows * 16 + blocks * 40 * 4 + std::size_t{40} * 64 * 4 + 4 + rows * d * 2 + 32 * d * 2));
}

TEST(Svdq, TrimReopensTheLastBlockAndAnEmptyCacheFitsAgain) {
  const int64_t heads = 2, d = 16, t = 40, group = 8, keep = 23;
  const lm::Tensor k = low_rank_keys(heads, t, d, 4, 70);
  const lm::Tensor v = test_support::random_kv(1, heads, t, d, 71, lm::DType::F32);
  SvdqCache full(options("8,4,4,2,2,1,1,0", std::nullopt, group));
  const std::vector<float> decoded = full.update_and_fetch(k, v).keys.to_f32();
  EXPECT_EQ(full.trim(t - keep), t - keep);
  EXPECT_EQ(full.frontier(), 16);
  // The reopened block's rows come back decoded; the next rows then quantize as before.
  const std::vector<float> after =
      full.update_and_fetch(test_support::token_rows(k, keep, t), test_support::token_rows(v, keep, t)).keys.to_f32();
  for (int64_t hh = 0; hh < heads; ++hh) {
    for (int64_t r = 0; r < 16; ++r) {
      for (int64_t c = 0; c < d; ++c) {
        EXPECT_EQ(after[static_cast<std::size_t>((hh * t + r) * d + c)],
                  decoded[static_cast<std::size_t>((hh * t + r) * d + c)]);
      }
    }
  }
  EXPECT_EQ(full.trim(1000), t);
  EXPECT_FALSE(full.fitted());
  EXPECT_EQ(full.offset(), 0);
  SvdqCache fresh(options("8,4,4,2,2,1,1,0", std::nullopt, group));
  const lm::Tensor k2 = low_rank_keys(heads, 20, d, 3, 80);
  EXPECT_EQ(full.update_and_fetch(k2, k2).keys.to_f32(), fresh.update_and_fetch(k2, k2).keys.to_f32())
      << "emptied by trim, the cache fits its basis on the next prompt";
}

TEST(Svdq, FusedAttentionEqualsAttentionOverFetchedRows) {
  const int64_t heads = 2, hq = 6, d = 64;
  // Keys of rank 8 (plus noise): the latent code has structure to use.
  const test_support::RowMaker rank8 = [](int64_t h, int64_t n, int64_t dim, uint64_t s) {
    return low_rank_keys(h, n, dim, 8, s);
  };
  for (const SvdqOptions& o :
       {options("8,4,2,1,1,0,0,0", std::nullopt), options("4,4,4,4,4,4,4,4", 64), options("8,0,2,0,1,0,0,1", 20, 16),
        // Blocks of 20 rows: the decode path's passes of 8 rows cross block boundaries.
        options("8,4,2,1,1,0,0,0", std::nullopt, 20)}) {
    SvdqCache fused(o), plain(o);
    const std::vector<int64_t> chunks{150, 17, 1, 1, 40};
    const std::vector<float> worst = test_support::fused_vs_fetched(fused, plain, heads, hq, d, chunks, 800, rank8);
    // A schedule of one width (4,4,...) scores its codes as integers against the projected query
    // rounded to 16 bits per block (caches/svdq_rows.h), which moves these outputs by up to ~2e-3.
    const float tolerance = o.svdq_bit_schedule == "4,4,4,4,4,4,4,4" ? 3e-3f : 1e-3f;
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      EXPECT_LE(worst[c], tolerance) << o.svdq_bit_schedule << " chunk " << chunks[c];
    }
  }
}

TEST(Svdq, BadOptionsNameTheField) {
  const auto message = [](const std::function<void(SvdqOptions&)>& change) {
    return test_support::option_error("svdq", change);
  };
  EXPECT_NE(message([](SvdqOptions& o) { o.svdq_rank = 0; }).find("svdq_rank"), std::string::npos);
  EXPECT_NE(message([](SvdqOptions& o) { o.svdq_energy_threshold = 0; }).find("svdq_energy_threshold"),
            std::string::npos);
  EXPECT_NE(message([](SvdqOptions& o) { o.svdq_energy_threshold = 1.5; }).find("svdq_energy_threshold"),
            std::string::npos);
  EXPECT_NE(message([](SvdqOptions& o) { o.svdq_group_size = 0; }).find("svdq_group_size"), std::string::npos);
  EXPECT_NE(message([](SvdqOptions& o) { o.svdq_bit_schedule = "8,4,2"; }).find("3 entries"), std::string::npos);
  EXPECT_NE(message([](SvdqOptions& o) { o.svdq_bit_schedule = "9,4,2,1,1,0,0,0"; }).find("bad entry '9'"),
            std::string::npos);
  EXPECT_NE(message([](SvdqOptions& o) { o.svdq_bit_schedule = "8,x,2,1,1,0,0,0"; }).find("bad entry 'x'"),
            std::string::npos);
  EXPECT_NE(message([](SvdqOptions& o) { o.svdq_bit_schedule = "0,0,0,0,0,0,0,0"; }).find("drops every group"),
            std::string::npos);
  EXPECT_EQ(message([](SvdqOptions& o) { o.svdq_bit_schedule = "2, 2, 2, 2, 2, 2, 2, 2"; }), "accepted");
}

}  // namespace
}  // namespace veloxquant
