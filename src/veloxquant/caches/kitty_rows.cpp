#include "veloxquant/caches/kitty_rows.h"

#include <algorithm>
#include <vector>

#include "lm/kernels/attention_tiles.h"
#include "lm/kernels/simd_dot.h"
#include "veloxquant/attention/integer_key_scores.h"
#include "veloxquant/attention/mask_split_queries.h"
#include "veloxquant/attention/narrow_plane_scores.h"
#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/attention/word_code_rows.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/attention/prefetch.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {
// A decode step streams every layer's cache from DRAM (30 layers of 4k rows are far past L2),
// and the hardware prefetchers restart at every 4 KiB page, so the core waited on memory
// between bursts of compute: the kitty values' accumulation took 1.9x the native cache's time
// per row in a 4k decode profile. Rows this far ahead of the ones being computed on are hinted
// into the cache (the host's own decode prefetches 64 rows ahead for the same reason).
constexpr int64_t kPrefetchRows = 64;

// A prefetch never faults, so a hinted range may pass the end of its buffer.
using attention::prefetch_bytes;  // attention/prefetch.h
}  // namespace

KittyRows::KittyRows(const QuantizedKeys& keys, const lm::Tensor& tail_keys, const lm::Tensor& values, int64_t frontier,
                     int64_t rows, int group, const attention::CodeOrder& hi_order,
                     const attention::CodeOrder& lo_order)
    : hi_codes_(keys.hi_codes),
      lo_codes_(keys.lo_codes),
      key_params_(keys.params),
      hi_mask_(keys.hi_mask),
      tail_keys_(attention::PlainRows::of(tail_keys)),
      values_(attention::PlainRows::of(values)),
      frontier_(frontier),
      rows_(rows),
      dk_(tail_keys.dim(3)),
      group_(group),
      hi_order_(hi_order),
      lo_order_(lo_order),
      hi_plane_(attention::kernels::narrow_plane(hi_order.bits(), hi_order.size())),
      lo_plane_(attention::kernels::narrow_plane(lo_order.bits(), lo_order.size())),
      integer_((hi_order.size() == 0 || hi_plane_.padded > 0) && (lo_order.size() == 0 || lo_plane_.padded > 0)) {
  if (!integer_) return;
  if (hi_order.size() > 0) hi_limit_ = attention::kernels::integer_query_limit(hi_plane_.bits, hi_plane_.dim());
  if (lo_order.size() > 0) lo_limit_ = attention::kernels::integer_query_limit(lo_plane_.bits, lo_plane_.dim());
}

void KittyRows::score_block_integer(int64_t b, int64_t h, int64_t block, int64_t a, int64_t n, const float* prepared,
                                    int64_t n_queries, const float* pairs, float* scores, int64_t ld) const {
  const int64_t d = dk_;
  const int64_t hi_dim = hi_order_.size() > 0 ? hi_plane_.dim() : 0,
                lo_dim = lo_order_.size() > 0 ? lo_plane_.dim() : 0;
  // Grow-only per-thread buffers: (scale, min) apart, the folded queries in natural channel order,
  // the integer queries of both planes with their steps and biases, the second plane's scores.
  thread_local std::vector<float> scale, min, natural, bias, step, zero_bias, partial;
  thread_local std::vector<int16_t> q16;
  thread_local std::vector<int32_t> identity;
  if (static_cast<int64_t>(identity.size()) < d) {
    identity.resize(static_cast<std::size_t>(d));
    for (int64_t c = 0; c < d; ++c) identity[static_cast<std::size_t>(c)] = static_cast<int32_t>(c);
  }
  scale.resize(static_cast<std::size_t>(d));
  min.resize(static_cast<std::size_t>(d));
  natural.resize(static_cast<std::size_t>(n_queries * d));
  bias.resize(static_cast<std::size_t>(n_queries));
  step.resize(static_cast<std::size_t>(2 * n_queries));
  zero_bias.assign(static_cast<std::size_t>(2 * n_queries), 0.0f);
  // The block's scales folded into every query in natural channel order; the mins give one bias
  // per query over all channels.
  attention::kernels::gather_pairs(pairs, identity.data(), d, scale.data(), min.data());
  attention::kernels::fold_scales(prepared, n_queries, d, scale.data(), min.data(), natural.data(), bias.data());
  // Each query split by the block's mask into its high and low channels (ascending channel: the
  // planes' natural orders), each plane rounded to 16-bit integers with a step of its own (a
  // plane's scales are its own: one step for both would round the smaller plane coarsely) and
  // laid out in the plane's padded code order: [high: n_queries x hi_dim][low: n_queries x lo_dim].
  q16.resize(static_cast<std::size_t>(n_queries * (hi_dim + lo_dim)));
  const auto split_plane = [](const attention::kernels::NarrowPlane& p, int64_t dim, int32_t limit) {
    attention::kernels::SplitPlane s;
    s.per_byte = p.bits > 0 ? 8 / p.bits : 1;
    s.padded = p.padded;
    s.dim = dim;
    s.limit = limit;
    return s;
  };
  const attention::kernels::SplitPlane planes[2] = {split_plane(hi_plane_, hi_dim, hi_limit_),
                                                    split_plane(lo_plane_, lo_dim, lo_limit_)};
  attention::kernels::split_queries_i16(natural.data(), n_queries, d, row_ptr<uint32_t>(hi_mask_, b, h, block), planes,
                                        q16.data(), step.data(), q16.data() + n_queries * hi_dim,
                                        step.data() + n_queries);
  bool first = true;
  for (int plane = 0; plane < 2; ++plane) {
    const int64_t dim = plane == 0 ? hi_dim : lo_dim;
    if (dim == 0) continue;
    const attention::kernels::NarrowPlane& p = plane == 0 ? hi_plane_ : lo_plane_;
    const int64_t offset = plane == 0 ? 0 : n_queries * hi_dim;
    float* plane_step = step.data() + plane * n_queries;
    float* plane_zero = zero_bias.data() + plane * n_queries;
    const lm::Tensor& packed = plane == 0 ? hi_codes_ : lo_codes_;
    const auto* bytes = reinterpret_cast<const uint8_t*>(row_ptr<uint32_t>(packed, b, h, a));
    const auto* readable_end = reinterpret_cast<const uint8_t*>(packed.raw_data()) + packed.nbytes();
    const int64_t row_stride = packed.strides()[2] * 4;
    if (first) {  // the first plane's scores with the mins' bias, straight into the tile
      attention::kernels::score_narrow_codes_i16(bytes, row_stride, n, p, readable_end,
                                                 {q16.data() + offset, plane_step, bias.data(), n_queries}, scores, ld);
      first = false;
      continue;
    }
    partial.resize(static_cast<std::size_t>(n_queries * n));
    attention::kernels::score_narrow_codes_i16(bytes, row_stride, n, p, readable_end,
                                               {q16.data() + offset, plane_step, plane_zero, n_queries}, partial.data(),
                                               n);
    for (int64_t q = 0; q < n_queries; ++q) {
      float* __restrict row = scores + q * ld;
      const float* __restrict low = partial.data() + q * n;
      for (int64_t j = 0; j < n; ++j) row[j] += low[j];
    }
  }
}

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
    if (end + kPrefetchRows <= frontier_) {
      // The code rows and block params kPrefetchRows on, for both planes (see kPrefetchRows).
      const int64_t ahead = a + kPrefetchRows;
      prefetch_bytes(row_ptr<uint32_t>(hi_codes_, b, h, ahead), n * hi_codes_.strides()[2] * 4);
      prefetch_bytes(row_ptr<uint32_t>(lo_codes_, b, h, ahead), n * lo_codes_.strides()[2] * 4);
      prefetch_bytes(row_ptr<uint16_t>(key_params_, b, h, ahead / group_), 2 * d * 2);
    }
    pairs.resize(static_cast<std::size_t>(2 * d));
    lm::kernels::simd::f16_to_f32(row_ptr<uint16_t>(key_params_, b, h, block), pairs.data(), 2 * d);
    if (integer_) {
      score_block_integer(b, h, block, a, n, prepared, n_queries, pairs.data(), scores + (a - j0), ld);
      a = end;
      continue;
    }
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
    for (int64_t j = 0; j < n_hi; ++j)
      hi_channel[static_cast<std::size_t>(j)] = hi[static_cast<std::size_t>(hi_order_.natural(j))];
    for (int64_t j = 0; j < n_lo; ++j)
      lo_channel[static_cast<std::size_t>(j)] = lo[static_cast<std::size_t>(lo_order_.natural(j))];
    for (int64_t r = 0; r < n_queries; ++r) {
      const float* q = prepared + r * pd;
      for (int64_t j = 0; j < n_hi; ++j) {
        const int32_t c = hi_channel[static_cast<std::size_t>(j)];
        folded_hi[static_cast<std::size_t>(r * n_hi + j)] = q[c] * pairs[2 * static_cast<std::size_t>(c)];
      }
      for (int64_t j = 0; j < n_lo; ++j) {
        const int32_t c = lo_channel[static_cast<std::size_t>(j)];
        folded_lo[static_cast<std::size_t>(r * n_lo + j)] = q[c] * pairs[2 * static_cast<std::size_t>(c)];
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
    attention::score_plain_tile(tail_keys_, b, h, t0 - frontier_, j1 - frontier_, prepared, n_queries,
                                scores + (t0 - j0), ld, scratch);
  }
}

void KittyRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                                int64_t ld, float* acc, attention::TileScratch& scratch) const {
  attention::accumulate_plain_tile(values_, b, h, j0, j1, {weights, n_queries, ld}, acc, scratch, kPrefetchRows);
}

}  // namespace veloxquant
