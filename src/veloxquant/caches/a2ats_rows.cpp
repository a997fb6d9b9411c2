#include "veloxquant/caches/a2ats_rows.h"

#include <algorithm>

#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

void a2ats_lookup_table(const float* centroids, int64_t subs, int64_t entries, int64_t sub, const float* query,
                        float* lut) {
  for (int64_t m = 0; m < subs; ++m) {
    const float* qm = query + m * sub;
    const float* book = centroids + m * entries * sub;
    float* out = lut + m * entries;
    for (int64_t c = 0; c < entries; ++c) {
      float dot = 0.0f;
      for (int64_t k = 0; k < sub; ++k) dot += qm[k] * book[c * sub + k];
      out[c] = dot;
    }
  }
}

A2atsRows::A2atsRows(const A2atsCallRows& rows)
    : r_(rows),
      key_dim_(rows.call_k->dim(3)),
      far_values_(attention::PlainRows::of(*rows.far_values)),
      tail_k_(attention::PlainRows::of(*rows.tail_k)),
      tail_v_(attention::PlainRows::of(*rows.tail_v)),
      call_k_(attention::PlainRows::of(*rows.call_k)),
      call_v_(attention::PlainRows::of(*rows.call_v)) {}

void A2atsRows::prepare_query(const float* query, float* prepared) const {
  const int64_t table = r_.subs * r_.entries;
  if (r_.far > 0) a2ats_lookup_table(r_.centroids, r_.subs, r_.entries, r_.sub, query, prepared);
  std::copy(query, query + key_dim_, prepared + table);
}

void A2atsRows::widen_exact(bool keys, int64_t b, int64_t h, int64_t a, int64_t e, float* out) const {
  const int64_t d = keys ? key_dim_ : far_values_.dim;
  const attention::PlainRows& tail = keys ? tail_k_ : tail_v_;
  const attention::PlainRows& call = keys ? call_k_ : call_v_;
  const int64_t tail_end = std::min(e, r_.tail);
  if (a < tail_end) tail.widen(b, h, a, tail_end, out);
  const int64_t c0 = std::max(a, r_.tail);
  if (c0 < e) call.widen(b, h, c0 - r_.tail, e - r_.tail, out + (c0 - a) * d);
}

void A2atsRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                           float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t width = prepared_dim(), table = r_.subs * r_.entries;
  const int32_t* pos = positions(b, h);
  const int64_t far_end = std::min(j1, r_.far);
  for (int64_t j = j0; j < far_end; ++j) {
    const uint8_t* code = row_ptr<uint8_t>(*r_.codes, b, h, pos[j]);
    for (int64_t r = 0; r < n_queries; ++r) {
      const float* lut = prepared + r * width;
      float s = 0.0f;
      for (int64_t m = 0; m < r_.subs; ++m) s += lut[m * r_.entries + code[m]];
      scores[r * ld + (j - j0)] = s;
    }
  }
  const int64_t e0 = std::max(j0, r_.far);
  if (e0 >= j1) return;
  float* k = scratch.f32(static_cast<std::size_t>((j1 - e0) * key_dim_));
  widen_exact(true, b, h, e0 - r_.far, j1 - r_.far, k);
  for (int64_t r = 0; r < n_queries; ++r) {
    const float* q = prepared + r * width + table;
    for (int64_t j = e0; j < j1; ++j) {
      const float* row = k + (j - e0) * key_dim_;
      float s = 0.0f;
      for (int64_t e = 0; e < key_dim_; ++e) s += q[e] * row[e];
      scores[r * ld + (j - j0)] = s;
    }
  }
}

void A2atsRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                                int64_t ld, float* acc, attention::TileScratch& scratch) const {
  const int64_t dv = far_values_.dim;
  const int32_t* pos = positions(b, h);
  float* v = scratch.f32_second(static_cast<std::size_t>((j1 - j0) * dv));
  const int64_t far_end = std::min(j1, r_.far);
  for (int64_t j = j0; j < far_end; ++j) far_values_.widen(b, h, pos[j], pos[j] + 1, v + (j - j0) * dv);
  const int64_t e0 = std::max(j0, r_.far);
  if (e0 < j1) widen_exact(false, b, h, e0 - r_.far, j1 - r_.far, v + (e0 - j0) * dv);
  for (int64_t r = 0; r < n_queries; ++r) {
    float* a = acc + r * dv;
    for (int64_t j = j0; j < j1; ++j) {
      const float w = weights[r * ld + (j - j0)];
      if (w == 0.0f) continue;
      const float* row = v + (j - j0) * dv;
      for (int64_t e = 0; e < dv; ++e) a[e] += w * row[e];
    }
  }
}

}  // namespace veloxquant
