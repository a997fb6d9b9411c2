// a2ats's retrieval row pass and table interleave against their scalar references, bit for bit,
// on every SIMD target this machine runs (the dots, the scaled logits and each head's maximum).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "lm/kernels/simd_dot.h"
#include "veloxquant/caches/a2ats_row_scan.h"
#include "support/simd_targets.h"

namespace veloxquant {
namespace {

struct Scan {
  std::vector<float> dots, logits, top;
};

template <class Fn>
Scan run(Fn fn, const std::vector<float>& lut4, int64_t subs, int64_t entries, const std::vector<uint8_t>& codes,
         int64_t stride, int64_t n, int64_t group, bool with_dots) {
  Scan s{std::vector<float>(static_cast<std::size_t>(group * n), -7.0f),
         std::vector<float>(static_cast<std::size_t>(group * n), -7.0f), std::vector<float>(4, -7.0f)};
  float* dots[4] = {};
  float* logits[4] = {};
  for (int64_t g = 0; g < group; ++g) {
    dots[g] = s.dots.data() + g * n;
    logits[g] = s.logits.data() + g * n;
  }
  fn({lut4.data(), subs, entries}, {codes.data(), stride, n}, group, 0.125f,
     {with_dots ? dots : nullptr, logits, s.top.data()});
  return s;
}

// The row scan over 0-1000 rows of random codes (5 bytes of slack per row), with and without the
// dots: every target equal to the scalar reference bit for bit.
void check_scans(const std::vector<float>& ref4, int64_t subs, int64_t entries, int64_t group, std::mt19937& rng) {
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{17}, int64_t{64}, int64_t{65}, int64_t{1000}}) {
    const int64_t stride = subs + 5;
    std::vector<uint8_t> codes(static_cast<std::size_t>(std::max<int64_t>(1, n * stride)));
    for (uint8_t& c : codes) c = static_cast<uint8_t>(rng() % entries);
    for (const bool with_dots : {true, false}) {
      const Scan want = run(scalar::a2ats_scan_rows, ref4, subs, entries, codes, stride, n, group, with_dots);
      test_support::for_each_simd_target([&](const char* target) {
        const Scan got = run(a2ats_scan_rows, ref4, subs, entries, codes, stride, n, group, with_dots);
        ASSERT_EQ(got.dots, want.dots) << target << " subs " << subs << " n " << n << " group " << group;
        ASSERT_EQ(got.logits, want.logits) << target << " subs " << subs << " n " << n;
        ASSERT_EQ(got.top, want.top) << target << " subs " << subs << " n " << n << " group " << group;
      });
    }
  }
}

TEST(A2atsRowScan, MatchesScalarOnEveryTarget) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const int64_t subs : {int64_t{8}, int64_t{3}, int64_t{16}}) {
    for (const int64_t entries : {int64_t{256}, int64_t{16}}) {
      for (const int64_t group : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}}) {
        std::vector<float> tables(static_cast<std::size_t>(group * subs * entries));
        for (float& t : tables) t = normal(rng);
        std::vector<float> lut4(static_cast<std::size_t>(4 * subs * entries), -9.0f), ref4(lut4);
        scalar::a2ats_interleave_tables(tables.data(), group, subs * entries, ref4.data());
        test_support::for_each_simd_target([&](const char* target) {
          std::vector<float> got(lut4.size(), -9.0f);
          a2ats_interleave_tables(tables.data(), group, subs * entries, got.data());
          ASSERT_EQ(got, ref4) << target << " group " << group;
        });
        check_scans(ref4, subs, entries, group, rng);
      }
    }
  }
}

// One query's tables as a2ats_lookup_table built them before: from zeros (`out` zeroed by the
// caller), one axpy of a codebook column per coordinate.
void axpy_table(const float* query, const std::vector<float>& book, int64_t subs, int64_t sub, int64_t entries,
                float* out) {
  for (int64_t m = 0; m < subs; ++m) {
    for (int64_t k = 0; k < sub; ++k) {
      lm::kernels::simd::axpy_f32(query[m * sub + k], book.data() + (m * sub + k) * entries, out + m * entries,
                                  entries);
    }
  }
}

// A group of random queries' tables at once, interleaved: the same floats as one axpy table per
// query, lanes past the group zero; nothing written when the kernel refuses the shape.
void check_group_tables(const std::vector<float>& book, int64_t subs, int64_t entries, int64_t sub, int64_t group,
                        std::mt19937& rng, std::normal_distribution<float>& normal, const char* target) {
  std::vector<float> qs(static_cast<std::size_t>(group * subs * sub));
  for (float& x : qs) x = normal(rng);
  const float* queries[4] = {};
  std::vector<float> tables(static_cast<std::size_t>(group * subs * entries), 0.0f);
  for (int64_t g = 0; g < group; ++g) {
    queries[g] = qs.data() + g * subs * sub;
    axpy_table(queries[g], book, subs, sub, entries, tables.data() + g * subs * entries);
  }
  std::vector<float> want4(static_cast<std::size_t>(4 * subs * entries));
  scalar::a2ats_interleave_tables(tables.data(), group, subs * entries, want4.data());
  std::vector<float> got4(want4.size(), -5.0f);
  if (a2ats_group_tables(book.data(), subs, entries, sub, queries, group, got4.data())) {
    ASSERT_EQ(got4, want4) << target << " entries " << entries << " sub " << sub << " group " << group;
  } else {
    EXPECT_EQ(got4, std::vector<float>(want4.size(), -5.0f)) << target << " wrote on refusal";
  }
}

TEST(A2atsRowScan, FusedTableIsTheAxpyTable) {
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const int64_t entries : {int64_t{256}, int64_t{16}, int64_t{8}, int64_t{2}}) {
    for (const int64_t sub : {int64_t{8}, int64_t{4}, int64_t{1}}) {
      const int64_t subs = 3;
      std::vector<float> book(static_cast<std::size_t>(subs * sub * entries)),
          query(static_cast<std::size_t>(subs * sub));
      for (float& x : book) x = normal(rng);
      for (float& x : query) x = normal(rng);
      test_support::for_each_simd_target([&](const char* target) {
        // The table a2ats_lookup_table built before.
        std::vector<float> want(static_cast<std::size_t>(subs * entries), 0.0f);
        axpy_table(query.data(), book, subs, sub, entries, want.data());
        for (int64_t group = 1; group <= 4; ++group)
          check_group_tables(book, subs, entries, sub, group, rng, normal, target);
        std::vector<float> got(want.size(), -5.0f);
        if (a2ats_fused_table(book.data(), subs, entries, sub, query.data(), got.data())) {
          ASSERT_EQ(got, want) << target << " entries " << entries << " sub " << sub;
        } else {
          EXPECT_EQ(got, std::vector<float>(want.size(), -5.0f)) << target << " wrote on refusal";
        }
      });
    }
  }
}

}  // namespace
}  // namespace veloxquant
