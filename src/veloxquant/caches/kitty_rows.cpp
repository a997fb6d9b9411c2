#include "veloxquant/caches/kitty_rows.h"

#include <algorithm>
#include <vector>

#include "lm/kernels/attention_tiles.h"
#include "lm/kernels/simd_dot.h"
#include "veloxquant/attention/word_code_rows.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

KittyRows::KittyRows(const lm::Tensor& hi_codes, const lm::Tensor& lo_codes, const lm::Tensor& key_params,
                     const lm::Tensor& hi_mask, const lm::Tensor& tail_keys, const lm::Tensor& values, int64_t frontier,
                     int64_t rows, int group, const attention::CodeOrder& hi_order,
                     const attention::CodeOrder& lo_order)
    : hi_codes_(hi_codes),
      lo_codes_(lo_codes),
      key_params_(key_params),
      hi_mask_(hi_mask),
      tail_keys_(attention::PlainRows::of(tail_keys)),
      values_(attention::PlainRows::of(values)),
      frontier_(frontier),
      rows_(rows),
      dk_(tail_keys.dim(3)),
      group_(group),
      hi_order_(hi_order),
      lo_order_(lo_order) {}

void KittyRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                           float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t d = dk_, pd = prepared_dim();
  // Grow-only per-thread buffers (the driver's scratch goes to the tail's plain rows): the
  // block's params widened, its channel lists, the folded queries, a tile of codes, partial scores.
  thread_local std::vector<float> pairs, folded_hi, folded_lo, bias, codes, partial;
  thread_local std::vector<int32_t> hi, lo, hi_channel, lo_channel;
  const int64_t quantized_end = std::min(j1, frontier_);
  for (int64_t a = j0; a < quantized_end;) {
    const int64_t block = a / group_, end = std::min(quantized_end, (block + 1) * group_), n = end - a;
    pairs.resize(static_cast<std::size_t>(2 * d));
    lm::kernels::simd::f16_to_f32(row_ptr<uint16_t>(key_params_, b, h, block), pairs.data(), 2 * d);
    const uint32_t* mask = row_ptr<uint32_t>(hi_mask_, b, h, block);
    hi.resize(static_cast<std::size_t>(d));
    lo.resize(static_cast<std::size_t>(d));
    int64_t n_hi = 0, n_lo = 0;
    for (int64_t c = 0; c < d; ++c) {
      if ((mask[c / 32] >> (c % 32)) & 1u) {
        hi[static_cast<std::size_t>(n_hi++)] = static_cast<int32_t>(c);
      } else {
        lo[static_cast<std::size_t>(n_lo++)] = static_cast<int32_t>(c);
      }
    }
    hi_channel.resize(static_cast<std::size_t>(d));
    lo_channel.resize(static_cast<std::size_t>(d));
    folded_hi.resize(static_cast<std::size_t>(n_queries * n_hi));
    folded_lo.resize(static_cast<std::size_t>(n_queries * n_lo));
    bias.assign(static_cast<std::size_t>(n_queries), 0.0f);
    // Each plane's channels in its code order: position e' of the plane holds channel list[natural(e')].
    for (int64_t j = 0; j < n_hi; ++j) hi_channel[static_cast<std::size_t>(j)] = hi[static_cast<std::size_t>(hi_order_.natural(j))];
    for (int64_t j = 0; j < n_lo; ++j) lo_channel[static_cast<std::size_t>(j)] = lo[static_cast<std::size_t>(lo_order_.natural(j))];
    for (int64_t r = 0; r < n_queries; ++r) {
      const float* q = prepared + r * pd;
      for (int64_t j = 0; j < n_hi; ++j) {
        const int32_t c = hi_channel[static_cast<std::size_t>(j)];
        folded_hi[static_cast<std::size_t>(r * n_hi + j)] = q[c] * pairs[static_cast<std::size_t>(2 * c)];
      }
      for (int64_t j = 0; j < n_lo; ++j) {
        const int32_t c = lo_channel[static_cast<std::size_t>(j)];
        folded_lo[static_cast<std::size_t>(r * n_lo + j)] = q[c] * pairs[static_cast<std::size_t>(2 * c)];
      }
      float s = 0.0f;
      for (int64_t c = 0; c < d; ++c) s += q[c] * pairs[static_cast<std::size_t>(2 * c + 1)];
      bias[static_cast<std::size_t>(r)] = s;
    }
    // Each plane: its codes unpacked once for the tile's rows of the block, scored for every query.
    bool first_plane = true, both_planes = false;
    for (int plane = 0; plane < 2; ++plane) {
      const int64_t width = plane == 0 ? n_hi : n_lo;
      if (width == 0) continue;
      const lm::Tensor& packed = plane == 0 ? hi_codes_ : lo_codes_;
      const attention::CodeOrder& order = plane == 0 ? hi_order_ : lo_order_;
      codes.resize(static_cast<std::size_t>(group_ * d));  // one size for both planes: no re-zeroing
      if (order.planar()) {
        order.unpack_rows(row_ptr<uint32_t>(packed, b, h, a), packed.strides()[2], n, codes.data());
      } else {
        attention::kernels::unpack_word_rows(row_ptr<uint32_t>(packed, b, h, a), packed.strides()[2], n, width,
                                             order.bits(), nullptr, codes.data());
      }
      const float* f = plane == 0 ? folded_hi.data() : folded_lo.data();
      if (first_plane) {
        lm::kernels::tiles::score_rows(f, width, n_queries, codes.data(), width, n, width, scores + (a - j0), ld);
        first_plane = false;
      } else {
        partial.resize(static_cast<std::size_t>(n_queries * group_));
        lm::kernels::tiles::score_rows(f, width, n_queries, codes.data(), width, n, width, partial.data(), n);
        // Both planes: (high + low) + bias in one pass.
        for (int64_t r = 0; r < n_queries; ++r) {
          float* row = scores + r * ld + (a - j0);
          const float* low = partial.data() + r * n;
          const float add = bias[static_cast<std::size_t>(r)];
          for (int64_t j = 0; j < n; ++j) row[j] = (row[j] + low[j]) + add;
        }
        both_planes = true;
      }
    }
    if (!both_planes) {  // one plane (a fraction of 0 or 1): its scores + bias
      for (int64_t r = 0; r < n_queries; ++r) {
        float* row = scores + r * ld + (a - j0);
        const float add = bias[static_cast<std::size_t>(r)];
        for (int64_t j = 0; j < n; ++j) row[j] = row[j] + add;
      }
    }
    a = end;
  }
  if (j1 > frontier_) {  // the tail's keys, rows from `frontier_` on in their own buffer
    const int64_t t0 = std::max(j0, frontier_);
    attention::score_plain_tile(tail_keys_, b, h, t0 - frontier_, j1 - frontier_, prepared, n_queries, scores + (t0 - j0),
                                ld, scratch);
  }
}

void KittyRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                                int64_t ld, float* acc, attention::TileScratch& scratch) const {
  attention::accumulate_plain_tile(values_, b, h, j0, j1, weights, n_queries, ld, acc, scratch);
}

}  // namespace veloxquant
