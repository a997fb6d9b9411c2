#include "veloxquant/eviction/page_summaries.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/half.h"

namespace veloxquant::eviction {

uint64_t page_fingerprint(const int32_t* positions, int64_t n) {
  // splitmix64 steps over the count and the positions.
  const auto mix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  uint64_t h = mix(static_cast<uint64_t>(n));
  for (int64_t j = 0; j < n; ++j) h = mix(h ^ static_cast<uint32_t>(positions[j]));
  return h == kNoFingerprint ? 1 : h;
}

void summarize_pages(const float* keys, int64_t rows, int64_t dim, int64_t page_size, uint16_t* max_out,
                     uint16_t* min_out) {
  thread_local std::vector<float> hi, lo;
  hi.resize(static_cast<std::size_t>(dim));
  lo.resize(static_cast<std::size_t>(dim));
  for (int64_t p = 0; p < page_count(rows, page_size); ++p) {
    const int64_t j0 = p * page_size, j1 = std::min(rows, j0 + page_size);
    std::copy_n(keys + j0 * dim, dim, hi.data());
    std::copy_n(keys + j0 * dim, dim, lo.data());
    for (int64_t j = j0 + 1; j < j1; ++j) {
      const float* k = keys + j * dim;
      float* h = hi.data();
      float* l = lo.data();
      for (int64_t c = 0; c < dim; ++c) {  // written as selects so that they vectorise (maxps / minps)
        h[c] = k[c] > h[c] ? k[c] : h[c];
        l[c] = k[c] < l[c] ? k[c] : l[c];
      }
    }
    for (int64_t c = 0; c < dim; ++c) {
      max_out[p * dim + c] = base::f32_to_f16(hi[c]);
      min_out[p * dim + c] = base::f32_to_f16(lo[c]);
    }
  }
}

std::vector<int32_t> top_channels(const float* queries, int64_t n, int64_t dim, int64_t k) {
  std::vector<int32_t> order;
  top_channels(queries, n, dim, k, order);
  return order;
}

void top_channels(const float* queries, int64_t n, int64_t dim, int64_t k, std::vector<int32_t>& order) {
  thread_local std::vector<float> weight;
  weight.assign(static_cast<std::size_t>(dim), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < dim; ++c) weight[c] += std::fabs(queries[i * dim + c]);
  }
  order.resize(static_cast<std::size_t>(dim));
  std::iota(order.begin(), order.end(), 0);
  k = std::clamp<int64_t>(k, 0, dim);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return weight[a] > weight[b] || (weight[a] == weight[b] && a < b); });
  order.resize(static_cast<std::size_t>(k));
  std::sort(order.begin(), order.end());
}

void page_scores(const uint16_t* max, const uint16_t* min, int64_t pages, int64_t dim,
                 const std::vector<int32_t>& channels, const float* queries, int64_t n, float* out) {
  // max(q max, q min) is q max for q >= 0 and q min otherwise, so the sum over the queries of a
  // channel's bound is max_c * (sum of its positive q) + min_c * (sum of its negative q): the
  // queries are folded once, and a page costs two products per channel.
  thread_local std::vector<float> positive, negative;
  const std::size_t k = channels.size();
  positive.assign(k, 0.0f);
  negative.assign(k, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const float* q = queries + i * dim;
    for (std::size_t t = 0; t < k; ++t) {
      const float v = q[channels[t]];
      (v >= 0.0f ? positive[t] : negative[t]) += v;
    }
  }
  for (int64_t p = 0; p < pages; ++p) {
    const uint16_t* hi = max + p * dim;
    const uint16_t* lo = min + p * dim;
    float total = 0.0f;
    for (std::size_t t = 0; t < k; ++t) {
      const int32_t c = channels[t];
      total += base::f16_to_f32(hi[c]) * positive[t] + base::f16_to_f32(lo[c]) * negative[t];
    }
    out[p] = total;
  }
}

std::vector<attention::RowRange> top_pages(const float* scores, int64_t pages, int64_t page_size, int64_t rows,
                                           int64_t keep_pages) {
  std::vector<attention::RowRange> ranges;
  top_pages(scores, pages, page_size, rows, keep_pages, ranges);
  return ranges;
}

void top_pages(const float* scores, int64_t pages, int64_t page_size, int64_t rows, int64_t keep_pages,
               std::vector<attention::RowRange>& ranges) {
  keep_pages = std::clamp<int64_t>(keep_pages, 0, pages);
  thread_local std::vector<int32_t> order;
  order.resize(static_cast<std::size_t>(pages));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + keep_pages, order.end(),
                    [&](int32_t a, int32_t b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); });
  order.resize(static_cast<std::size_t>(keep_pages));
  std::sort(order.begin(), order.end());
  ranges.clear();
  for (const int32_t p : order) {
    const int64_t begin = p * page_size, end = std::min(rows, begin + page_size);
    if (!ranges.empty() && ranges.back().second == begin) {
      ranges.back().second = end;
    } else {
      ranges.emplace_back(begin, end);
    }
  }
}

}  // namespace veloxquant::eviction
