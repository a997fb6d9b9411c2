// The fused nearest-codeword search over an axis-sorted book (quant/projected_search.h) against
// the full scalar fused search (the same index, ties to the lowest index included) on every SIMD
// target this machine runs: random, stretched, duplicated and collapsed books, points on, near
// and far from the codewords.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "veloxquant/quant/nearest_codeword.h"
#include "veloxquant/quant/projected_search.h"
#include "support/simd_targets.h"

namespace veloxquant::pvq {
namespace {

struct Book {
  std::vector<float> transposed, norms;
};

// words: entries x sub, row-major.
Book transpose(const std::vector<float>& words, int64_t entries, int sub) {
  Book b;
  b.transposed.resize(words.size());
  b.norms.resize(static_cast<std::size_t>(entries));
  for (int64_t c = 0; c < entries; ++c) {
    float s = 0.0f;
    for (int e = 0; e < sub; ++e) {
      const float w = words[static_cast<std::size_t>(c * sub + e)];
      b.transposed[static_cast<std::size_t>(e * entries + c)] = w;
      s += w * w;
    }
    b.norms[static_cast<std::size_t>(c)] = s;
  }
  return b;
}

enum class Shape { kNormal, kStretched, kDuplicated, kCollapsed, kGrid };

std::vector<float> make_words(Shape shape, int64_t entries, int sub, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> words(static_cast<std::size_t>(entries * sub));
  for (int64_t c = 0; c < entries; ++c) {
    for (int e = 0; e < sub; ++e) {
      float& w = words[static_cast<std::size_t>(c * sub + e)];
      switch (shape) {
        case Shape::kNormal:
        case Shape::kDuplicated:
          w = dist(rng);
          break;
        case Shape::kStretched:  // one long axis, not a coordinate one
          w = dist(rng) * (e == 0 ? 1.0f : 0.1f) + (e == 1 ? 3.0f * words[static_cast<std::size_t>(c * sub)] : 0.0f);
          break;
        case Shape::kCollapsed:  // every codeword the same: every distance ties
          w = 0.5f + static_cast<float>(e);
          break;
        case Shape::kGrid:  // small integers: many exact ties in distance and in projection
          w = static_cast<float>(static_cast<int>(rng() % 5) - 2);
          break;
      }
    }
  }
  if (shape == Shape::kDuplicated) {  // later copies of earlier codewords tie exactly
    for (int64_t c = entries / 2; c < entries; c += 3) {
      for (int e = 0; e < sub; ++e)
        words[static_cast<std::size_t>(c * sub + e)] = words[static_cast<std::size_t>((c - entries / 2) * sub + e)];
    }
  }
  return words;
}

// Points: random (every tenth far out), on codewords, between two codewords, and the origin.
std::vector<std::vector<float>> make_points(const std::vector<float>& words, int64_t entries, int sub,
                                            std::mt19937& rng, std::normal_distribution<float>& dist) {
  std::vector<std::vector<float>> points;
  for (int i = 0; i < 40; ++i) {
    std::vector<float> x(static_cast<std::size_t>(sub));
    for (float& v : x) v = dist(rng) * (i % 10 == 9 ? 50.0f : 1.0f);
    points.push_back(x);
  }
  for (int i = 0; i < 20; ++i) {
    const int64_t a = static_cast<int64_t>(rng() % static_cast<uint32_t>(entries));
    const int64_t b = static_cast<int64_t>(rng() % static_cast<uint32_t>(entries));
    std::vector<float> on(static_cast<std::size_t>(sub)), mid(on.size());
    for (int e = 0; e < sub; ++e) {
      on[static_cast<std::size_t>(e)] = words[static_cast<std::size_t>(a * sub + e)];
      mid[static_cast<std::size_t>(e)] =
          0.5f * (words[static_cast<std::size_t>(a * sub + e)] + words[static_cast<std::size_t>(b * sub + e)]);
    }
    points.push_back(on);
    points.push_back(mid);
  }
  points.emplace_back(static_cast<std::size_t>(sub), 0.0f);
  return points;
}

// On every target, each point's projected search gives the full scalar fused search's index.
void check_points(const ProjectedBook& projected, const Book& book, const std::vector<std::vector<float>>& points,
                  Shape shape, int64_t entries, int sub) {
  test_support::for_each_simd_target([&](const char* target) {
    std::vector<int64_t> got(points.size(), -1);
    for (std::size_t i = 0; i < points.size(); ++i) got[i] = projected.nearest(points[i].data());
    for (std::size_t i = 0; i < points.size(); ++i) {
      const int64_t want =
          scalar::nearest_codeword_fused(book.transposed.data(), book.norms.data(), entries, sub, points[i].data());
      ASSERT_EQ(got[i], want) << target << " shape " << static_cast<int>(shape) << " entries " << entries << " sub "
                              << sub << " point " << i;
    }
  });
}

TEST(ProjectedSearch, MatchesFullFusedSearchOnEveryTarget) {
  std::mt19937 rng(21);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const Shape shape : {Shape::kNormal, Shape::kStretched, Shape::kDuplicated, Shape::kCollapsed, Shape::kGrid}) {
    for (const int64_t entries : {int64_t{1}, int64_t{5}, int64_t{16}, int64_t{17}, int64_t{300}, int64_t{4096}}) {
      for (const int sub : {4, 3, 8}) {
        const std::vector<float> words = make_words(shape, entries, sub, rng);
        const Book book = transpose(words, entries, sub);
        ProjectedBook projected;
        projected.load(book.transposed.data(), book.norms.data(), entries, sub);
        check_points(projected, book, make_points(words, entries, sub, rng, dist), shape, entries, sub);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// The batch form: strided points (a row's sub-vectors), each the single search's index.
TEST(ProjectedSearch, BatchMatchesSinglePoints) {
  std::mt19937 rng(22);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t entries = 4096;
  const int sub = 4;
  const Book book = transpose(make_words(Shape::kNormal, entries, sub, rng), entries, sub);
  ProjectedBook projected;
  projected.load(book.transposed.data(), book.norms.data(), entries, sub);
  const int64_t count = 37, stride = 6;
  std::vector<float> xs(static_cast<std::size_t>(count * stride));
  for (float& v : xs) v = dist(rng);
  std::vector<int64_t> got(static_cast<std::size_t>(count), -1);
  projected.nearest_batch(xs.data(), count, stride, got.data());
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(
        got[static_cast<std::size_t>(i)],
        scalar::nearest_codeword_fused(book.transposed.data(), book.norms.data(), entries, sub, xs.data() + i * stride))
        << "point " << i;
  }
}

}  // namespace
}  // namespace veloxquant::pvq
