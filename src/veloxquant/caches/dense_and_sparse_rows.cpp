#include "veloxquant/caches/dense_and_sparse_rows.h"

#include <algorithm>
#include <cstring>

#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

DenseAndSparseRows::DenseAndSparseRows(const attention::RowSource& dense, const std::vector<int32_t>& key_position,
                                       const SinkRows& sinks, const SparseOutliers& outliers)
    : dense_(dense), key_position_(key_position), sinks_(sinks), outliers_(outliers) {}

namespace {

// Sinks of batch element b among rows [j0, j1): [first, last) into its ascending positions.
std::pair<int64_t, int64_t> sinks_in(const SinkRows& sinks, int64_t b, int64_t j0, int64_t j1) {
  if (!sinks.enabled() || sinks.count(b) == 0) return {0, 0};
  const int32_t* p = sinks.positions(b);
  const int64_t n = sinks.count(b);
  const int64_t first = std::lower_bound(p, p + n, static_cast<int32_t>(j0)) - p;
  const int64_t last = std::lower_bound(p, p + n, static_cast<int32_t>(j1)) - p;
  return {first, last};
}

}  // namespace

void DenseAndSparseRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared,
                                    int64_t n_queries, float* scores, int64_t ld,
                                    attention::TileScratch& scratch) const {
  dense_.score_tile(b, h, j0, j1, prepared, n_queries, scores, ld, scratch);
  const int64_t d = key_dim(), pd = prepared_dim();
  // score += q_c * delta per outlier and query; a GQA group of three unrolled (the common block).
  const int32_t* position = key_position_.data();
  if (n_queries == 3) {
    outliers_.for_each(true, b, h, j0, j1, [&](int64_t row, int64_t channel, float delta) {
      const float* q = prepared + position[channel];
      float* s = scores + (row - j0);
      s[0] += q[0] * delta;
      s[ld] += q[pd] * delta;
      s[2 * ld] += q[2 * pd] * delta;
    });
  } else {
    outliers_.for_each(true, b, h, j0, j1, [&](int64_t row, int64_t channel, float delta) {
      for (int64_t r = 0; r < n_queries; ++r)
        scores[r * ld + (row - j0)] += prepared[r * pd + position[channel]] * delta;
    });
  }
  const auto [first, last] = sinks_in(sinks_, b, j0, j1);
  if (first == last) return;
  // Grow-only per-thread rows: a sink key widened, then in the prepared query's order (the dense
  // source's prepare_query is a permutation, with zeros at any padding).
  thread_local std::vector<float> natural, ordered;
  natural.resize(static_cast<std::size_t>(d));
  ordered.resize(static_cast<std::size_t>(pd));
  for (int64_t s = first; s < last; ++s) {
    const int64_t row = sinks_.positions(b)[s];
    cache_rows::load_f32(sinks_.key_row(b, h, s), sinks_.dtype(), static_cast<std::size_t>(d), natural.data());
    dense_.prepare_query(natural.data(), ordered.data());
    for (int64_t r = 0; r < n_queries; ++r) {
      const float* q = prepared + r * pd;
      float dot = 0.0f;
      for (int64_t c = 0; c < pd; ++c) dot += q[c] * ordered[static_cast<std::size_t>(c)];
      scores[r * ld + (row - j0)] = dot;
    }
  }
}

void DenseAndSparseRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights,
                                         int64_t n_queries, int64_t ld, float* acc,
                                         attention::TileScratch& scratch) const {
  const int64_t dv = value_dim();
  const auto [first, last] = sinks_in(sinks_, b, j0, j1);
  // Sink rows: their weight leaves the dense rows (whose codes hold a neutralized neighbour)
  // and goes to the exact row. A per-thread copy of the weights, zeroed in those columns.
  thread_local std::vector<float> masked, row;
  const float* w = weights;
  if (first != last) {
    masked.assign(weights, weights + (n_queries - 1) * ld + (j1 - j0));
    for (int64_t s = first; s < last; ++s) {
      const int64_t col = sinks_.positions(b)[s] - j0;
      for (int64_t r = 0; r < n_queries; ++r) masked[static_cast<std::size_t>(r * ld + col)] = 0.0f;
    }
    w = masked.data();
  }
  dense_.accumulate_tile(b, h, j0, j1, w, n_queries, ld, acc, scratch);
  if (n_queries == 3) {
    outliers_.for_each(false, b, h, j0, j1, [&](int64_t row, int64_t channel, float delta) {
      const float* x = w + (row - j0);
      float* a = acc + channel;
      a[0] += x[0] * delta;
      a[dv] += x[ld] * delta;
      a[2 * dv] += x[2 * ld] * delta;
    });
  } else {
    outliers_.for_each(false, b, h, j0, j1, [&](int64_t row, int64_t channel, float delta) {
      for (int64_t r = 0; r < n_queries; ++r) acc[r * dv + channel] += w[r * ld + (row - j0)] * delta;
    });
  }
  row.resize(static_cast<std::size_t>(dv));
  for (int64_t s = first; s < last; ++s) {
    const int64_t col = sinks_.positions(b)[s] - j0;
    cache_rows::load_f32(sinks_.value_row(b, h, s), sinks_.dtype(), static_cast<std::size_t>(dv), row.data());
    for (int64_t r = 0; r < n_queries; ++r) {
      const float wr = weights[r * ld + col];
      float* a = acc + r * dv;
      for (int64_t e = 0; e < dv; ++e) a[e] += wr * row[static_cast<std::size_t>(e)];
    }
  }
}

}  // namespace veloxquant
