#include "veloxquant/caches/anchorkv_rows.h"

#include <algorithm>

#include "base/half.h"
#include "veloxquant/caches/anchorkv_cache.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

AnchorKvRows::AnchorKvRows(const AnchorKvCache& cache, const lm::Tensor& call_k, const lm::Tensor& call_v)
    : c_(cache),
      exact_(cache.tail_k_, cache.tail_v_, cache.offset_ - cache.rows_, call_k, call_v),
      anchor_k_(attention::PlainRows::of(cache.anchor_k_)),
      anchor_v_(attention::PlainRows::of(cache.anchor_v_)) {}

int64_t AnchorKvRows::rows(int64_t, int64_t) const { return c_.rows_ + exact_.rows(); }

void AnchorKvRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                              float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t d = key_dim(), n_anchor = c_.anchors_, end = std::min(j1, c_.rows_);
  const int bits = c_.o_.anchorkv_residual_bits;
  if (j0 < end) {
    const bool table = n_anchor <= kMaxTableAnchors;
    // Anchor keys of (b, h) then, per query, their dot products (table) or one anchor row (not).
    float* ak = scratch.f32(static_cast<std::size_t>((table ? n_anchor : 1) * d + n_queries * n_anchor + d));
    float* dots = ak + (table ? n_anchor : 1) * d;
    float* res = dots + n_queries * n_anchor;
    if (table) {
      anchor_k_.widen(b, h, 0, n_anchor, ak);
      for (int64_t r = 0; r < n_queries; ++r) {
        for (int64_t a = 0; a < n_anchor; ++a) {
          float s = 0.0f;
          for (int64_t e = 0; e < d; ++e) s += prepared[r * d + e] * ak[a * d + e];
          dots[r * n_anchor + a] = s;
        }
      }
    }
    for (int64_t j = j0; j < end; ++j) {
      const uint32_t* rec = row_ptr<uint32_t>(c_.records_, b, h, j);
      const int64_t a = rec[0] & 0xFFFF;
      const float coef = base::f16_to_f32(static_cast<uint16_t>(rec[0] >> 16));
      if (!table) anchor_k_.widen(b, h, a, a + 1, ak);
      const bool has_residual = rec[2] != AnchorKvCache::kNoResidual;
      if (has_residual) {
        anchorkv_decode_residual(row_ptr<uint8_t>(c_.residual_codes_, b, h, rec[2]),
                                 row_ptr<uint16_t>(c_.residual_params_, b, h, rec[2]), d, bits, res);
      }
      for (int64_t r = 0; r < n_queries; ++r) {
        const float* q = prepared + r * d;
        float s;
        if (table) {
          s = coef * dots[r * n_anchor + a];
        } else {
          s = 0.0f;
          for (int64_t e = 0; e < d; ++e) s += q[e] * ak[e];
          s *= coef;
        }
        if (has_residual) {
          for (int64_t e = 0; e < d; ++e) s += q[e] * res[e];
        }
        scores[r * ld + (j - j0)] = s;
      }
    }
  }
  const int64_t e0 = std::max(j0, c_.rows_);
  if (e0 < j1) exact_.score(b, h, e0 - c_.rows_, j1 - c_.rows_, prepared, d, n_queries, scores + (e0 - j0), ld, scratch);
}

void AnchorKvRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                                   int64_t ld, float* acc, attention::TileScratch& scratch) const {
  const int64_t dk = key_dim(), dv = value_dim(), n_anchor = c_.anchors_, end = std::min(j1, c_.rows_);
  const int bits = c_.o_.anchorkv_residual_bits;
  if (j0 < end) {
    const bool table = n_anchor <= kMaxTableAnchors;
    float* gathered = scratch.f32_second(static_cast<std::size_t>((table ? n_queries * n_anchor : 0) + 2 * dv));
    float* row = gathered + (table ? n_queries * n_anchor : 0);
    float* res = row + dv;
    if (table) std::fill(gathered, gathered + n_queries * n_anchor, 0.0f);
    for (int64_t j = j0; j < end; ++j) {
      const uint32_t* rec = row_ptr<uint32_t>(c_.records_, b, h, j);
      const int64_t a = rec[1] & 0xFFFF;
      const float coef = base::f16_to_f32(static_cast<uint16_t>(rec[1] >> 16));
      const bool has_residual = rec[2] != AnchorKvCache::kNoResidual;
      if (has_residual) {
        anchorkv_decode_residual(row_ptr<uint8_t>(c_.residual_codes_, b, h, rec[2]) + dk * bits / 8,
                                 row_ptr<uint16_t>(c_.residual_params_, b, h, rec[2]) + 2, dv, bits, res);
      }
      if (!table) anchor_v_.widen(b, h, a, a + 1, row);
      for (int64_t r = 0; r < n_queries; ++r) {
        const float w = weights[r * ld + (j - j0)];
        if (w == 0.0f) continue;
        float* out = acc + r * dv;
        if (table) {
          gathered[r * n_anchor + a] += w * coef;
        } else {
          for (int64_t e = 0; e < dv; ++e) out[e] += w * coef * row[e];
        }
        if (has_residual) {
          for (int64_t e = 0; e < dv; ++e) out[e] += w * res[e];
        }
      }
    }
    if (table) {
      for (int64_t a = 0; a < n_anchor; ++a) {
        bool used = false;
        for (int64_t r = 0; r < n_queries && !used; ++r) used = gathered[r * n_anchor + a] != 0.0f;
        if (!used) continue;
        anchor_v_.widen(b, h, a, a + 1, row);
        for (int64_t r = 0; r < n_queries; ++r) {
          const float g = gathered[r * n_anchor + a];
          float* out = acc + r * dv;
          for (int64_t e = 0; e < dv; ++e) out[e] += g * row[e];
        }
      }
    }
  }
  const int64_t e0 = std::max(j0, c_.rows_);
  if (e0 < j1) exact_.accumulate(b, h, e0 - c_.rows_, j1 - c_.rows_, weights + (e0 - j0), n_queries, ld, acc, scratch);
}

}  // namespace veloxquant
