#include "veloxquant/caches/a2ats_rows.h"

#include <algorithm>

#include "lm/kernels/attention_tiles.h"
#include "lm/kernels/simd_dot.h"
#include "veloxquant/caches/a2ats_row_scan.h"

#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

void a2ats_lookup_table(const float* centroids, int64_t subs, int64_t entries, int64_t sub, const float* query,
                        float* lut) {
  // centroids are [subs][sub][entries] (the cache's stored layout, a2ats_cache.h): each query
  // coordinate times its row of contiguous centroid values is one SIMD axpy (lm/kernels/
  // simd_dot.h); the plain loop compiled to scalar code and built a decode step's 9 tables in 16%
  // of the step's instructions.
  if (a2ats_fused_table(centroids, subs, entries, sub, query, lut)) return;  // the same floats, fewer passes
  for (int64_t m = 0; m < subs; ++m) {
    float* out = lut + m * entries;
    const float* book = centroids + m * sub * entries;
    std::fill(out, out + entries, 0.0f);
    for (int64_t k = 0; k < sub; ++k) lm::kernels::simd::axpy_f32(query[m * sub + k], book + k * entries, out, entries);
  }
}

A2atsRows::A2atsRows(const A2atsCallRows& rows)
    : r_(rows),
      key_dim_(rows.call_k->dim(3)),
      head_(rows.far_dots ? 1 : rows.subs * rows.entries),
      far_values_(attention::PlainRows::of(*rows.far_values)),
      exact_(*rows.tail_k, *rows.tail_v, rows.tail, *rows.call_k, *rows.call_v) {}

void A2atsRows::prepare_query(const float* query, float* prepared) const {
  if (r_.far_dots) {
    // The driver prepares call.queries + row * D: the row picks the retrieval's scores.
    const int64_t row = (query - r_.queries) / key_dim_;  // (an index: integer division intended)
    prepared[0] = static_cast<float>(row);
  } else if (r_.far > 0) {
    a2ats_lookup_table(r_.centroids, r_.subs, r_.entries, r_.sub, query, prepared);
  }
  std::copy(query, query + key_dim_, prepared + head_);
}

void A2atsRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                           float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t width = prepared_dim(), table = head_;
  const int32_t* pos = positions(b, h);
  const int64_t far_end = std::min(j1, r_.far);
  if (r_.far_dots) {
    for (int64_t r = 0; r < n_queries; ++r) {
      const float* dots = r_.far_dots + static_cast<int64_t>(prepared[r * width]) * r_.far_rows;
      for (int64_t j = j0; j < far_end; ++j) scores[r * ld + (j - j0)] = dots[pos[j]];
    }
  }
  // Without the retrieval's dots (a long prefill chunk): each query's table (2^bits x D/sub
  // floats, 8 KiB at the defaults) over the tile's rows in turn, so it stays in L1 while it is
  // read (row-major, the tile's queries' tables were each read once per row).
  if (!r_.far_dots && j0 < far_end) {
    for (int64_t r = 0; r < n_queries; ++r) {
      const float* lut = prepared + r * width;
      for (int64_t j = j0; j < far_end; ++j) {
        const uint8_t* code = row_ptr<uint8_t>(*r_.codes, b, h, pos[j]);
        float s = 0.0f;
        for (int64_t m = 0; m < r_.subs; ++m) s += lut[m * r_.entries + code[m]];
        scores[r * ld + (j - j0)] = s;
      }
    }
  }
  const int64_t e0 = std::max(j0, r_.far);
  if (e0 < j1) {
    exact_.score(b, h, e0 - r_.far, j1 - r_.far, prepared + table, width, n_queries, scores + (e0 - j0), ld, scratch);
  }
}

void A2atsRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                                int64_t ld, float* acc, attention::TileScratch& scratch) const {
  const int64_t dv = far_values_.dim;
  const int32_t* pos = positions(b, h);
  const int64_t far_end = std::min(j1, r_.far);
  if (j0 < far_end) {
    float* v = scratch.f32_second(static_cast<std::size_t>((far_end - j0) * dv));
    for (int64_t j = j0; j < far_end; ++j) far_values_.widen(b, h, pos[j], pos[j] + 1, v + (j - j0) * dv);
    lm::kernels::tiles::accumulate_rows(weights, ld, n_queries, v, dv, far_end - j0, dv, acc, dv);
  }
  const int64_t e0 = std::max(j0, r_.far);
  if (e0 < j1) exact_.accumulate(b, h, e0 - r_.far, j1 - r_.far, weights + (e0 - j0), n_queries, ld, acc, scratch);
}

}  // namespace veloxquant
