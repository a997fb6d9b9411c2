#include "veloxquant/caches/svdq_rows.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "base/half.h"
#include "lm/kernels/simd_dot.h"
#include "veloxquant/attention/integer_key_scores.h"
#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/caches/svdq_latent_decode.h"
#include "veloxquant/caches/svdq_latent_scores.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/attention/prefetch.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {

// The integer path's plane: every coded channel at one width (2, 4 or 8 bits), groups back to back.
attention::kernels::NarrowPlane uniform_plane(const SvdqLayout& layout) {
  if (layout.coded == 0 || layout.groups.empty()) return {};
  const int bits = layout.groups.front().bits;
  for (const SvdqGroup& g : layout.groups) {
    if (g.bits != bits || g.byte_offset * 8 != g.first * bits) return {};
  }
  attention::kernels::NarrowPlane plane = attention::kernels::narrow_plane(bits, layout.coded);
  if (plane.plane_bytes != layout.row_bytes) return {};
  return plane;
}

std::atomic<uint64_t> next_call{1};

// A decode step streams every layer's cache from DRAM and the hardware prefetchers restart at
// every 4 KiB page: the codes, params and value rows this many rows ahead of the tile are hinted
// into the cache (the host's own decode and kitty do the same; it changes no result).
constexpr int64_t kPrefetchRows = 64;

using attention::prefetch_bytes;  // attention/prefetch.h

}  // namespace

SvdqRows::SvdqRows(const lm::Tensor& codes, const lm::Tensor& params, const lm::Tensor& basis, const lm::Tensor& values,
                   const SvdqLayout& layout, int64_t rows, int group, bool leading_mean)
    : codes_(codes),
      params_(params),
      basis_(basis),
      values_(attention::PlainRows::of(values)),
      layout_(layout),
      rows_(rows),
      group_(group),
      leading_mean_(leading_mean),
      call_(next_call.fetch_add(1)),
      plane_(uniform_plane(layout)),
      fused_(latent_codes_fuse(layout)) {
  if (plane_.padded > 0 && plane_.dim() > kMaxPlaneDim) plane_ = {};
  if (plane_.padded == 0) return;
  limit_ = attention::kernels::integer_query_limit(plane_.bits, plane_.dim());
  for (int64_t e = 0; e < plane_.dim(); ++e) {
    const int64_t i = plane_.natural(e);
    pair_of_[static_cast<std::size_t>(e)] = static_cast<int32_t>(i < 0 ? layout.coded : i);
  }
}

SvdqRows::Projection SvdqRows::project(int64_t b, int64_t h, const float* prepared, int64_t n_queries) const {
  const int64_t coded = layout_.coded, dk = layout_.dim;
  const int64_t lead = leading_mean_ ? 1 : 0, width = lead + coded;
  struct Kept {
    uint64_t call = 0;
    int64_t b = -1, h = -1, n_queries = 0;
    std::vector<float> queries, projected, padded;
  };
  thread_local Kept kept;
  const std::size_t query_floats = static_cast<std::size_t>(n_queries * dk);
  if (kept.call == call_ && kept.b == b && kept.h == h && kept.n_queries == n_queries &&
      std::memcmp(kept.queries.data(), prepared, query_floats * sizeof(float)) == 0) {
    return {kept.projected.data(), kept.padded.data()};
  }
  kept.call = call_;
  kept.b = b;
  kept.h = h;
  kept.n_queries = n_queries;
  kept.queries.assign(prepared, prepared + query_floats);
  kept.projected.resize(static_cast<std::size_t>(n_queries * width));
  attention::kernels::score_rows(prepared, dk, n_queries, row_ptr<float>(basis_, b, h, 0), dk, width, dk,
                                 kept.projected.data(), width);
  if (plane_.padded > 0) {
    const int64_t dim = plane_.dim();
    kept.padded.assign(static_cast<std::size_t>(n_queries * dim), 0.0f);
    for (int64_t r = 0; r < n_queries; ++r) {
      for (int64_t e = 0; e < dim; ++e) {
        const int32_t i = pair_of_[static_cast<std::size_t>(e)];
        if (i < coded)
          kept.padded[static_cast<std::size_t>(r * dim + e)] =
              kept.projected[static_cast<std::size_t>(r * width + lead + i)];
      }
    }
  }
  return {kept.projected.data(), kept.padded.data()};
}

void SvdqRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                          float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t coded = layout_.coded, n = j1 - j0;
  const int64_t lead = leading_mean_ ? 1 : 0, width = lead + coded;
  // Projected queries [n_queries, width] (column 0 = <q, mean> with a leading mean row, then
  // <q, basis_i>), kept across the head's tiles.
  const Projection p = project(b, h, prepared, n_queries);
  const float* projected = p.projected;
  if (plane_.padded > 0) {
    // Block by block: the block's (scale, min) widened (plus a zero pair for padding) and put in
    // code order, folded into the projected queries and rounded; <q, mean> joins the mins' bias.
    const int64_t dim = plane_.dim();
    float* pairs = scratch.f32(static_cast<std::size_t>(2 * coded + 2 + 3 * dim + 2 * n_queries));
    float* scale = pairs + 2 * coded + 2;
    float* min = scale + dim;
    float* shifted = min + dim;
    float* step = shifted + dim;
    float* bias = step + n_queries;
    pairs[2 * coded] = pairs[2 * coded + 1] = 0.0f;
    auto* q16 = reinterpret_cast<int16_t*>(scratch.u8(static_cast<std::size_t>(n_queries * dim) * sizeof(int16_t)));
    const auto* readable_end = reinterpret_cast<const uint8_t*>(codes_.raw_data()) + codes_.nbytes();
    for (int64_t j = j0; j < j1;) {
      const int64_t block = j / group_, end = std::min(j1, (block + 1) * group_);
      lm::kernels::simd::f16_to_f32(row_ptr<uint16_t>(params_, b, h, block), pairs, 2 * coded);
      attention::kernels::gather_pairs(pairs, pair_of_.data(), dim, scale, min);
      // The rounding's error e_c = folded_c - step * q16_c adds sum_c e_c * code_c to a score; its
      // part at the middle code, m = (2^b - 1) / 2, is the same for every row and goes into the
      // bias, which halves the error left (codes are unsigned: the middle is their mean). The fold
      // with mins min_c + m * scale_c gives bias + m * sum_c folded_c; m * step * sum_c q16_c is
      // taken off after.
      const float middle = static_cast<float>((1 << plane_.bits) - 1) * 0.5f;
      for (int64_t e = 0; e < dim; ++e) shifted[e] = min[e] + middle * scale[e];
      attention::kernels::fold_queries_i16(p.padded, n_queries, dim, scale, shifted, limit_, q16, step, bias);
      for (int64_t r = 0; r < n_queries; ++r) {
        const int16_t* q = q16 + r * dim;
        int32_t rounded = 0;
        for (int64_t e = 0; e < dim; ++e) rounded += q[e];
        bias[r] -= middle * step[r] * static_cast<float>(rounded);
        if (leading_mean_) bias[r] += projected[r * width];
      }
      attention::kernels::score_narrow_codes_i16(row_ptr<uint8_t>(codes_, b, h, j), layout_.row_bytes, end - j, plane_,
                                                 readable_end, {q16, step, bias, n_queries}, scores + (j - j0), ld);
      j = end;
    }
    return;
  }
  float* latent = scratch.f32(static_cast<std::size_t>(n * coded + 4 * coded));
  float* scale = latent + n * coded;  // the current block's (scale, min) per coded channel, in f32
  float* min = scale + coded;
  float* pairs = min + coded;         // the block's f16 pairs widened in SIMD (exact), then split
  if (j1 + kPrefetchRows <= rows_) {  // the next tile's codes and params (see kPrefetchRows)
    prefetch_bytes(row_ptr<uint8_t>(codes_, b, h, j1 + kPrefetchRows - n), n * layout_.row_bytes);
    const int64_t first_block = (j0 + kPrefetchRows) / group_, last_block = (j1 + kPrefetchRows - 1) / group_;
    prefetch_bytes(row_ptr<uint16_t>(params_, b, h, first_block), (last_block - first_block + 1) * 4 * coded);
  }
  const float* q = projected + lead;
  if (fused_ && n_queries <= 3) {
    // A decode step: scores straight from the codes (svdq_latent_scores.h), block by block in
    // whole passes of 8 rows from j0, so every row scores as score_rows over the tile would score
    // it. A pass that crosses a block boundary is decoded row by row with each block's params and
    // scored as that same pass.
    int64_t loaded = -1;
    for (int64_t j = j0; j < j1;) {
      const int64_t block = j / group_, end = std::min(j1, (block + 1) * group_);
      if (block != loaded) {
        load_block_params(b, h, block, pairs, scale, min);
        loaded = block;
      }
      const int64_t run = end == j1 ? end - j : (end - j) / 8 * 8;
      if (run > 0) {
        score_latent_codes({&layout_, row_ptr<uint8_t>(codes_, b, h, j), layout_.row_bytes, run, scale, min}, q, width,
                           n_queries, scores + (j - j0), ld, latent);
        j += run;
        continue;
      }
      const int64_t pass_end = std::min(j + 8, j1);
      decode_span(b, h, j, pass_end, pairs, scale, min, latent);
      loaded = -1;
      attention::kernels::score_rows(q, width, n_queries, latent, coded, pass_end - j, coded, scores + (j - j0), ld);
      j = pass_end;
    }
  } else {
    decode_span(b, h, j0, j1, pairs, scale, min, latent);
    attention::kernels::score_rows(q, width, n_queries, latent, coded, n, coded, scores, ld);
  }
  if (!leading_mean_) return;
  for (int64_t r = 0; r < n_queries; ++r) {
    const float shift = projected[r * width];
    float* row = scores + r * ld;
    for (int64_t jj = 0; jj < n; ++jj) row[jj] += shift;
  }
}

void SvdqRows::load_block_params(int64_t b, int64_t h, int64_t block, float* pairs, float* scale, float* min) const {
  const int64_t coded = layout_.coded;
  lm::kernels::simd::f16_to_f32(row_ptr<uint16_t>(params_, b, h, block), pairs, 2 * coded);
  for (int64_t i = 0; i < coded; ++i) {
    scale[i] = pairs[2 * i];
    min[i] = pairs[2 * i + 1];
  }
}

void SvdqRows::decode_span(int64_t b, int64_t h, int64_t j0, int64_t j1, float* pairs, float* scale, float* min,
                           float* out) const {
  // Block by block (a tile spans at most a few): the block's params converted once, then its
  // rows of the span decoded in one call (svdq_latent_decode.h).
  for (int64_t j = j0; j < j1;) {
    const int64_t block = j / group_, end = std::min(j1, (block + 1) * group_);
    load_block_params(b, h, block, pairs, scale, min);
    decode_latent_rows(layout_, row_ptr<uint8_t>(codes_, b, h, j), layout_.row_bytes, end - j, scale, min,
                       out + (j - j0) * layout_.coded);
    j = end;
  }
}

void SvdqRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                               int64_t ld, float* acc, attention::TileScratch& scratch) const {
  attention::accumulate_plain_tile(values_, b, h, j0, j1, {weights, n_queries, ld}, acc, scratch, kPrefetchRows);
}

}  // namespace veloxquant
