// The SIMD nearest-codeword searches (product VQ's ||c||^2 - 2<x, c>, NSNQuant's squared
// distance) against their scalar references (the same index, including ties resolved to the
// lowest index) on every SIMD target this machine runs, and against a brute-force search in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "veloxquant/quant/nearest_codeword.h"
#include "support/simd_targets.h"

namespace veloxquant::pvq {
namespace {

// Squared distance, in double, from x to codeword c of `words` (entries x sub, row-major).
double squared_distance(const std::vector<float>& x, const std::vector<float>& words, int64_t c, int sub) {
  double d = 0.0;
  for (int e = 0; e < sub; ++e) {
    const double diff = double{x[static_cast<std::size_t>(e)]} - words[static_cast<std::size_t>(c * sub + e)];
    d += diff * diff;
  }
  return d;
}

// Duplicates: codeword c = entries / 2 + 7k (while c + 3 < entries) becomes a copy of codeword
// c - entries / 2, so the copies tie exactly and the lower index must win.
void duplicate_codewords(std::vector<float>& words, int64_t entries, int sub) {
  for (int64_t c = entries / 2; c + 3 < entries; c += 7) {
    for (int e = 0; e < sub; ++e)
      words[static_cast<std::size_t>(c * sub + e)] = words[static_cast<std::size_t>((c - entries / 2) * sub + e)];
  }
}

// A book as the searches take it: transposed (sub x entries) and each codeword's squared norm.
struct SearchBook {
  std::vector<float> transposed, norms;
};
SearchBook search_book(const std::vector<float>& words, int64_t entries, int sub) {
  SearchBook book{std::vector<float>(words.size()), std::vector<float>(static_cast<std::size_t>(entries))};
  for (int64_t c = 0; c < entries; ++c) {
    float s = 0.0f;
    for (int e = 0; e < sub; ++e) {
      const float w = words[static_cast<std::size_t>(c * sub + e)];
      book.transposed[static_cast<std::size_t>(e * entries + c)] = w;
      s += w * w;
    }
    book.norms[static_cast<std::size_t>(c)] = s;
  }
  return book;
}

TEST(NearestCodeword, MatchesScalarAndBruteForce) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const int64_t entries : {int64_t{1}, int64_t{5}, int64_t{8}, int64_t{13}, int64_t{256}, int64_t{4096}}) {
    for (const int sub : {1, 3, 4, 8, 16}) {
      std::vector<float> words(static_cast<std::size_t>(entries * sub));
      for (float& w : words) w = dist(rng);
      duplicate_codewords(words, entries, sub);
      // References, not a structured binding: clang 14 cannot capture one in a lambda.
      const SearchBook book = search_book(words, entries, sub);
      const std::vector<float>& transposed = book.transposed;
      const std::vector<float>& norms = book.norms;
      for (int trial = 0; trial < 40; ++trial) {
        std::vector<float> x(static_cast<std::size_t>(sub));
        if (trial % 4 == 0 && entries > 1) {  // exactly on a duplicated codeword
          const int64_t c = std::min<int64_t>(entries - 1, entries / 2 + int64_t{7} * (trial % 3));
          for (int e = 0; e < sub; ++e) x[static_cast<std::size_t>(e)] = words[static_cast<std::size_t>(c * sub + e)];
        } else {
          for (float& v : x) v = dist(rng);
        }
        const int64_t ref = scalar::nearest_codeword(transposed.data(), norms.data(), entries, sub, x.data());
        const int64_t ref_squared = scalar::nearest_codeword_squared(transposed.data(), entries, sub, x.data());
        int64_t simd = -1;
        test_support::for_each_simd_target([&](const char* target) {
          simd = nearest_codeword(transposed.data(), norms.data(), entries, sub, x.data());
          const int64_t simd_squared = nearest_codeword_squared(transposed.data(), entries, sub, x.data());
          ASSERT_EQ(simd, ref) << target << " entries " << entries << " sub " << sub << " trial " << trial;
          ASSERT_EQ(simd_squared, ref_squared)
              << target << " entries " << entries << " sub " << sub << " trial " << trial;
        });
        // Exactly on a duplicated codeword the squared distance is 0 at the first copy.
        if (trial % 4 == 0 && entries > 1) {
          const int64_t c = std::min<int64_t>(entries - 1, entries / 2 + int64_t{7} * (trial % 3));
          ASSERT_EQ(squared_distance(x, words, ref_squared, sub), 0.0);
          ASSERT_LE(ref_squared, c);
        }
        {  // The squared search picks a codeword no farther (in double) than float rounding allows.
          double best = 1e300;
          for (int64_t c = 0; c < entries; ++c) best = std::min(best, squared_distance(x, words, c, sub));
          ASSERT_LE(squared_distance(x, words, ref_squared, sub), best * (1.0 + 1e-5) + 1e-6);
        }
        // Independent check: no codeword is closer in double by more than float rounding.
        double best = 1e300;
        for (int64_t c = 0; c < entries; ++c) best = std::min(best, squared_distance(x, words, c, sub));
        double chosen = 0.0, scale = 0.0;
        for (int e = 0; e < sub; ++e) {
          const double diff = double{x[static_cast<std::size_t>(e)]} - words[static_cast<std::size_t>(simd * sub + e)];
          chosen += diff * diff;
          scale += double{x[static_cast<std::size_t>(e)]} * x[static_cast<std::size_t>(e)] +
                   norms[static_cast<std::size_t>(simd)];
        }
        ASSERT_LE(chosen, best + 1e-5 * (scale + 1.0)) << "entries " << entries << " sub " << sub;
      }
    }
  }
}

// One book (entries x sub, random or descending, with duplicated codewords) and 24 points: the
// fused search equal to its scalar reference on every target, and as near as the unfused one.
void check_fused(int64_t entries, int sub, bool descending, std::mt19937& rng, std::normal_distribution<float>& dist) {
  std::vector<float> words(static_cast<std::size_t>(entries * sub));
  for (float& w : words) w = dist(rng);
  if (descending) {  // codeword c = (entries - c) * u: ever closer to a point along u
    for (int64_t c = 0; c < entries; ++c) {
      for (int e = 0; e < sub; ++e)
        words[static_cast<std::size_t>(c * sub + e)] = static_cast<float>(entries - c) * 0.01f * (1.0f + e);
    }
  }
  duplicate_codewords(words, entries, sub);
  // References, not a structured binding: clang 14 cannot capture one in a lambda.
  const SearchBook book = search_book(words, entries, sub);
  const std::vector<float>& transposed = book.transposed;
  const std::vector<float>& norms = book.norms;
  for (int trial = 0; trial < 24; ++trial) {
    std::vector<float> x(static_cast<std::size_t>(sub));
    if (trial % 4 == 0 && entries > 1) {
      const int64_t c = std::min<int64_t>(entries - 1, entries / 2 + int64_t{7} * (trial % 3));
      for (int e = 0; e < sub; ++e) x[static_cast<std::size_t>(e)] = words[static_cast<std::size_t>(c * sub + e)];
    } else if (descending && trial % 4 == 1) {
      for (int e = 0; e < sub; ++e) x[static_cast<std::size_t>(e)] = -1.0f - e;  // the last entry wins
    } else {
      for (float& v : x) v = dist(rng);
    }
    const int64_t ref = scalar::nearest_codeword_fused(transposed.data(), norms.data(), entries, sub, x.data());
    test_support::for_each_simd_target([&](const char* target) {
      const int64_t simd = nearest_codeword_fused(transposed.data(), norms.data(), entries, sub, x.data());
      ASSERT_EQ(simd, ref) << target << " entries " << entries << " sub " << sub << " trial " << trial << " descending "
                           << descending;
    });
    // It picks a codeword as near (in double) as the unfused search's, to float rounding.
    const int64_t plain = scalar::nearest_codeword(transposed.data(), norms.data(), entries, sub, x.data());
    double scale = 1.0;
    for (int e = 0; e < sub; ++e) scale += double{x[static_cast<std::size_t>(e)]} * x[static_cast<std::size_t>(e)];
    ASSERT_LE(squared_distance(x, words, ref, sub),
              squared_distance(x, words, plain, sub) + 1e-5 * (scale + norms[static_cast<std::size_t>(ref)]));
  }
}

// The fused search (one rounding per term, four vectors per block with a min test) against its
// scalar std::fma reference on every target, with duplicated codewords (ties to the lowest index),
// points on a codeword, entry counts with and without whole blocks, and a book sorted so that the
// running minimum improves in every block (the slow path of every block).
TEST(NearestCodeword, FusedMatchesScalarOnEveryTarget) {
  std::mt19937 rng(8);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const int64_t entries :
       {int64_t{1}, int64_t{5}, int64_t{16}, int64_t{64}, int64_t{100}, int64_t{256}, int64_t{4096}}) {
    for (const int sub : {1, 3, 4, 8, 16}) {
      for (const bool descending : {false, true}) {
        check_fused(entries, sub, descending, rng, dist);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// `count` random points `sub + 2` floats apart searched in one pass: each gets the single-point
// fused search's index on every target.
void check_batch(const std::vector<float>& transposed, const std::vector<float>& norms, int64_t entries, int sub,
                 int64_t count, std::mt19937& rng, std::normal_distribution<float>& dist) {
  const int64_t stride = sub + 2;
  std::vector<float> xs(static_cast<std::size_t>(count * stride));
  for (float& v : xs) v = dist(rng);
  test_support::for_each_simd_target([&](const char* target) {
    std::vector<int64_t> got(static_cast<std::size_t>(count), -1);
    nearest_codewords_fused(transposed.data(), norms.data(), entries, sub, xs.data(), count, stride, got.data());
    for (int64_t i = 0; i < count; ++i) {
      ASSERT_EQ(got[static_cast<std::size_t>(i)],
                scalar::nearest_codeword_fused(transposed.data(), norms.data(), entries, sub, xs.data() + i * stride))
          << target << " entries " << entries << " sub " << sub << " point " << i;
    }
  });
}

// Several points per pass over the book: each gets the single-point fused search's index, on every
// target, for point counts around the batch of 4 and strided points (a row's sub-vectors).
TEST(NearestCodeword, FusedBatchMatchesSinglePoints) {
  std::mt19937 rng(12);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const int64_t entries : {int64_t{3}, int64_t{40}, int64_t{256}, int64_t{4096}}) {
    for (const int sub : {4, 8, 5}) {
      std::vector<float> transposed(static_cast<std::size_t>(entries * sub)), norms(static_cast<std::size_t>(entries));
      for (float& w : transposed) w = dist(rng);
      for (int64_t c = 0; c < entries; ++c) {
        float s = 0.0f;
        for (int e = 0; e < sub; ++e)
          s += transposed[static_cast<std::size_t>(e * entries + c)] *
               transposed[static_cast<std::size_t>(e * entries + c)];
        norms[static_cast<std::size_t>(c)] = s;
      }
      for (const int64_t count : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{9}, int64_t{16}}) {
        check_batch(transposed, norms, entries, sub, count, rng, dist);
        if (HasFatalFailure()) return;
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::pvq
