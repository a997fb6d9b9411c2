#include "veloxquant/caches/dense_and_sparse_rows.h"

#include <algorithm>
#include <cstring>

#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

DenseAndSparseRows::DenseAndSparseRows(const attention::RowSource& dense, const std::vector<int32_t>& key_position,
                                       const SinkRows& sinks, const SparseOutliers& outliers)
    : dense_(dense),
      key_position_(key_position),
      sinks_(sinks),
      outliers_(outliers),
      key_dim_(dense.key_dim()),
      value_dim_(dense.value_dim()),
      prepared_dim_(dense.prepared_dim()) {}

namespace {

// Sinks of batch element b among rows [j0, j1): [first, last) into its ascending positions.
std::pair<int64_t, int64_t> sinks_in(const SinkRows& sinks, int64_t b, int64_t j0, int64_t j1) {
  if (!sinks.enabled() || sinks.count(b) == 0) return {0, 0};
  const int32_t* p = sinks.positions(b);
  const int64_t n = sinks.count(b);
  if (p[n - 1] < j0 || p[0] >= j1) return {0, 0};  // the usual tile: no sink inside, no searches
  const int64_t first = std::lower_bound(p, p + n, static_cast<int32_t>(j0)) - p;
  const int64_t last = std::lower_bound(p, p + n, static_cast<int32_t>(j1)) - p;
  return {first, last};
}

// The outlier corrections of rows [j0, j1) of one (b, h), block by block:
//   keys:   scores[r * ld + row - j0] += prepared[r * pd + position[channel]] * delta
//   values: acc[r * dv + channel] += weights[r * ld + row - j0] * delta
// Each correction is one multiply and one add per query in stored order, as before, so the sums
// are unchanged bit for bit. A block wholly inside the tile (the common case: tiles are whole
// multiples of the group) with a GQA group of three and a head of 64 or 128 channels runs a
// straight loop in a function of its own with the index split by a constant shift and mask: inline
// in the tile function, the loop had spilled its pointers and the shift count to the stack (~30
// instructions per outlier, ~40 per kv row for keys and values at kvquant's defaults). Other blocks
// (cut by the tile edge, other counts and sizes) take the general loop.
template <int kShift>
[[gnu::noinline]] void key_block_3(const uint32_t* idx, const float* delta, int64_t k, const int32_t* position,
                                   const float* q0, int64_t pd, float* s) {
  constexpr uint32_t kLow = (1u << kShift) - 1u;
  constexpr int64_t kLd = attention::kTileRows;  // the driver's score rows: constant offsets
  for (int64_t i = 0; i < k; ++i) {
    const uint32_t u = idx[i];
    const float* q = q0 + position[u & kLow];
    float* out = s + (u >> kShift);
    const float x = delta[i];
    out[0] += q[0] * x;
    out[kLd] += q[pd] * x;
    out[2 * kLd] += q[2 * pd] * x;
  }
}

template <int kShift>
[[gnu::noinline]] void value_block_3(const uint32_t* idx, const float* delta, int64_t k, const float* w0, float* a) {
  constexpr uint32_t kLow = (1u << kShift) - 1u;
  constexpr int64_t kLd = attention::kTileRows, kDv = int64_t{1} << kShift;
  for (int64_t i = 0; i < k; ++i) {
    const uint32_t u = idx[i];
    const float* w = w0 + (u >> kShift);
    float* out = a + (u & kLow);
    const float x = delta[i];
    out[0] += w[0] * x;
    out[kDv] += w[kLd] * x;
    out[2 * kDv] += w[2 * kLd] * x;
  }
}

void add_key_outliers(const SparseOutliers::HeadBlocks& o, int64_t j0, int64_t j1, const int32_t* position,
                      const float* prepared, int64_t pd, int64_t nq, float* scores, int64_t ld) {
  const bool fast = nq == 3 && ld == attention::kTileRows && (o.shift == 6 || o.shift == 7);
  for (int64_t block = j0 / o.group; block * o.group < j1; ++block) {
    const uint32_t* idx = o.index + block * o.index_stride;
    const float* delta = o.delta + block * o.delta_stride;
    const int64_t first = block * o.group;
    const bool whole = first >= j0 && first + o.group <= j1;
    if (fast && whole) {
      float* s = scores + (first - j0);
      if (o.shift == 6) {
        key_block_3<6>(idx, delta, o.k, position, prepared, pd, s);
      } else {
        key_block_3<7>(idx, delta, o.k, position, prepared, pd, s);
      }
      continue;
    }
    for (int64_t i = 0; i < o.k; ++i) {
      const int64_t row = first + idx[i] / o.dim;
      if (row < j0 || row >= j1) continue;
      const int32_t p = position[idx[i] % o.dim];
      for (int64_t r = 0; r < nq; ++r) scores[r * ld + (row - j0)] += prepared[r * pd + p] * delta[i];
    }
  }
}

void add_value_outliers(const SparseOutliers::HeadBlocks& o, int64_t j0, int64_t j1, const float* weights, int64_t ld,
                        int64_t nq, float* acc, int64_t dv) {
  const bool fast = nq == 3 && ld == attention::kTileRows && (o.shift == 6 || o.shift == 7) && dv == o.dim;
  for (int64_t block = j0 / o.group; block * o.group < j1; ++block) {
    const uint32_t* idx = o.index + block * o.index_stride;
    const float* delta = o.delta + block * o.delta_stride;
    const int64_t first = block * o.group;
    const bool whole = first >= j0 && first + o.group <= j1;
    if (fast && whole) {
      const float* w = weights + (first - j0);
      if (o.shift == 6) {
        value_block_3<6>(idx, delta, o.k, w, acc);
      } else {
        value_block_3<7>(idx, delta, o.k, w, acc);
      }
      continue;
    }
    for (int64_t i = 0; i < o.k; ++i) {
      const int64_t row = first + idx[i] / o.dim;
      if (row < j0 || row >= j1) continue;
      const int64_t channel = idx[i] % o.dim;
      for (int64_t r = 0; r < nq; ++r) acc[r * dv + channel] += weights[r * ld + (row - j0)] * delta[i];
    }
  }
}

}  // namespace

void DenseAndSparseRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared,
                                    int64_t n_queries, float* scores, int64_t ld,
                                    attention::TileScratch& scratch) const {
  dense_.score_tile(b, h, j0, j1, prepared, n_queries, scores, ld, scratch);
  const int64_t d = key_dim(), pd = prepared_dim();
  if (outliers_.enabled() && j0 < j1) {
    const SparseOutliers::HeadBlocks o = outliers_.head_blocks(true, b, h);
    add_key_outliers(o, j0, j1, key_position_.data(), prepared, pd, n_queries, scores, ld);
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
  if (outliers_.enabled() && j0 < j1) {
    const SparseOutliers::HeadBlocks o = outliers_.head_blocks(false, b, h);
    add_value_outliers(o, j0, j1, w, ld, n_queries, acc, dv);
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
