#include "veloxquant/caches/adakv_rows.h"

#include <algorithm>
#include <cstring>

#include "lm/kernels/simd_dot.h"
#include "veloxquant/attention/float_key_scores.h"
#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/attention/word_plane_scores.h"
#include "veloxquant/caches/adakv_cache.h"
#include "veloxquant/caches/group_affine_rows.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

AdaKVTierLayout::AdaKVTierLayout(int bits_in, int64_t key_dim, int64_t value_dim, int64_t group)
    : bits(bits_in),
      planar_keys(attention::CodeOrder::is_planar(bits_in, key_dim) &&
                  attention::kernels::can_score_codes_f32(bits_in, key_dim * bits_in / 8)),
      key_order(bits_in, key_dim),
      value_order(bits_in, value_dim, group) {
  if (!key_order.planar()) words.emplace(bits_in, key_dim);
}

AdaKVLayouts::AdaKVLayouts(const std::array<int, 3>& bits, int64_t key_dim_in, int64_t value_dim_in, int64_t group_in)
    : tiers{AdaKVTierLayout(bits[0], key_dim_in, value_dim_in, group_in),
            AdaKVTierLayout(bits[1], key_dim_in, value_dim_in, group_in),
            AdaKVTierLayout(bits[2], key_dim_in, value_dim_in, group_in)},
      key_dim(key_dim_in),
      value_dim(value_dim_in),
      group(group_in) {
  // The natural query first (the tail's rows read it), then each tier's copy.
  int64_t offset = key_dim;
  for (AdaKVTierLayout& t : tiers) {
    t.offset = offset;
    offset += t.dim();
  }
  prepared_dim = offset;
}

bool AdaKVLayouts::matches(const std::array<int, 3>& bits, int64_t kd, int64_t vd, int64_t g) const {
  return key_dim == kd && value_dim == vd && group == g && tiers[0].bits == bits[0] && tiers[1].bits == bits[1] &&
         tiers[2].bits == bits[2];
}

AdaKVRows::AdaKVRows(const AdaKVCache& cache, const AdaKVLayouts& layouts)
    : cache_(cache),
      layouts_(layouts),
      tail_k_(attention::PlainRows::of(cache.tail_k_)),
      tail_v_(attention::PlainRows::of(cache.tail_v_)) {}

int64_t AdaKVRows::key_dim() const { return cache_.dk_; }
int64_t AdaKVRows::value_dim() const { return cache_.dv_; }
int64_t AdaKVRows::rows(int64_t, int64_t) const { return cache_.offset_; }

void AdaKVRows::prepare_query(const float* query, float* prepared) const {
  std::memcpy(prepared, query, static_cast<std::size_t>(layouts_.key_dim) * sizeof(float));
  for (const AdaKVTierLayout& t : layouts_.tiers) {
    if (t.words) {
      // Through the precomputed channel of each position (key_dim at padding): no divisions.
      const int32_t* channel = t.words->pair_index.data();
      float* out = prepared + t.offset;
      for (int64_t e = 0, dim = t.dim(); e < dim; ++e)
        out[e] = channel[e] < layouts_.key_dim ? query[channel[e]] : 0.0f;
    } else {
      t.key_order.permute(query, prepared + t.offset);
    }
  }
}

namespace {
// The tier table of one batch element read through one pointer and its strides, once per tile:
// AdaKVCache::tier / slot went through Tensor accessors per block and head (~8 per kv row).
struct TierTable {
  const uint8_t* base;
  int64_t head_stride, block_stride;
  int tier(int64_t h, int64_t block) const { return base[h * head_stride + block * block_stride]; }
  // Position of head h among the heads of its tier at this block (its plane's slot).
  int64_t slot(int64_t h, int64_t block) const {
    const int t = tier(h, block);
    int64_t s = 0;
    for (int64_t g = 0; g < h; ++g) s += tier(g, block) == t ? 1 : 0;
    return s;
  }
};
TierTable tier_table(const lm::Tensor& tiers, int64_t b) {
  return {row_ptr<uint8_t>(tiers, b, 0, 0), tiers.strides()[1], tiers.strides()[2]};
}
}  // namespace

void AdaKVRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                           float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const AdaKVCache& c = cache_;
  const int64_t d = c.dk_, frontier = c.frontier_, group = c.group_, pd = layouts_.prepared_dim;
  const int64_t quantized_end = std::min(j1, frontier);
  if (j0 < quantized_end) {
    // Scratch: the block's (scale, min) pairs widened (and a zero pair for padding), the pairs in
    // the tier's order, the tier's queries back to back, folded queries, biases (2 n_queries), the
    // f32 tile of the planar widths the byte kernel does not take.
    const int64_t dim_max = std::max({layouts_.tiers[0].dim(), layouts_.tiers[1].dim(), layouts_.tiers[2].dim()});
    float* pairs = scratch.f32(
        static_cast<std::size_t>(2 * d + 2 + 2 * dim_max + 2 * n_queries * dim_max + 2 * n_queries + group * d));
    float* scale = pairs + 2 * d + 2;
    float* min = scale + dim_max;
    float* queries = min + dim_max;
    float* folded = queries + n_queries * dim_max;
    float* bias = folded + n_queries * dim_max;
    float* tile = bias + n_queries + n_queries;
    pairs[2 * d] = pairs[2 * d + 1] = 0.0f;
    int queries_tier = -1;
    const TierTable tiers = tier_table(c.tiers_, b);
    for (int64_t a = j0; a < quantized_end;) {
      const int64_t block = a / group, end = std::min(quantized_end, (block + 1) * group), n = end - a;
      const int t = tiers.tier(h, block);
      const AdaKVTierLayout& layout = layouts_.tiers[static_cast<std::size_t>(t)];
      const lm::Tensor& plane = c.key_codes_[static_cast<std::size_t>(t)];
      const uint32_t* codes = row_ptr<uint32_t>(plane, b, tiers.slot(h, block), a);
      const int64_t row_words = plane.dim(3), dim = layout.dim();
      if (t != queries_tier) {  // the tier's queries back to back, copied once per run of its blocks
        for (int64_t r = 0; r < n_queries; ++r) {
          std::memcpy(queries + r * dim, prepared + r * pd + layout.offset,
                      static_cast<std::size_t>(dim) * sizeof(float));
        }
        queries_tier = t;
      }
      // The block's per-channel (scale, min) pairs in one widening, then into the tier's order.
      lm::kernels::simd::f16_to_f32(row_ptr<uint16_t>(c.key_params_, b, h, block), pairs, 2 * d);
      float* s = scores + (a - j0);
      if (layout.words) {
        attention::kernels::gather_pairs(pairs, layout.words->pair_index.data(), dim, scale, min);
        attention::kernels::fold_scales(queries, n_queries, dim, scale, min, folded, bias);
        attention::kernels::score_word_planes(codes, row_words, n, layout.words->planes, nullptr, folded, n_queries,
                                              bias, s, ld);
      } else if (layout.planar_keys) {
        // The query stays in f32 (attention/float_key_scores.h): the integer path's 16-bit rounding
        // moved scores by ~1e-4 of their scale on spread keys.
        attention::kernels::gather_pairs(pairs, layout.key_order.natural_indices().data(), d, scale, min);
        attention::kernels::fold_scales(queries, n_queries, d, scale, min, folded, bias);
        attention::kernels::score_codes_f32(reinterpret_cast<const uint8_t*>(codes), row_words * 4, n,
                                            d * layout.bits / 8, layout.bits, folded, bias, n_queries, s, ld);
      } else {
        attention::kernels::gather_pairs(pairs, layout.key_order.natural_indices().data(), d, scale, min);
        attention::kernels::fold_scales(queries, n_queries, d, scale, min, folded, bias);
        layout.key_order.unpack_rows(codes, row_words, n, tile);
        attention::kernels::score_rows(folded, d, n_queries, tile, d, n, d, s, ld);
        for (int64_t r = 0; r < n_queries; ++r) {
          for (int64_t j = 0; j < n; ++j) s[r * ld + j] += bias[r];
        }
      }
      a = end;
    }
  }
  if (j1 > frontier) {
    // The natural queries (each prepared query's first key_dim floats) back to back, as the plain
    // tile reads them; the tile's own scratch is the driver's f32 buffer, so these go in floats2.
    const int64_t t0 = std::max(j0, frontier);
    float* natural = scratch.f32_second(static_cast<std::size_t>(n_queries * d));
    for (int64_t r = 0; r < n_queries; ++r) {
      std::memcpy(natural + r * d, prepared + r * pd, static_cast<std::size_t>(d) * sizeof(float));
    }
    attention::score_plain_tile(tail_k_, b, h, t0 - frontier, j1 - frontier, natural, n_queries, scores + (t0 - j0), ld,
                                scratch);
  }
}

void AdaKVRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                                int64_t ld, float* acc, attention::TileScratch& scratch) const {
  const AdaKVCache& c = cache_;
  const int64_t frontier = c.frontier_, group = c.group_;
  const int64_t quantized_end = std::min(j1, frontier);
  const TierTable tiers = j0 < quantized_end ? tier_table(c.tiers_, b) : TierTable{nullptr, 0, 0};
  // Per block: sum_j w_j (code_j * s_jg + m_jg) = sum_j (w_j s_jg) code_j + sum_j w_j m_jg, the
  // weights scaled per row and channel group, the codes accumulated as they are read.
  for (int64_t a = j0; a < quantized_end;) {
    const int64_t block = a / group;
    const int t = tiers.tier(h, block);
    const int64_t slot = tiers.slot(h, block);
    // Consecutive blocks of the same tier and slot are consecutive rows of one code plane: one call
    // for all of them (the per-call weight scaling and setup ran per 32-row block before).
    int64_t end = std::min(quantized_end, (block + 1) * group);
    while (end < quantized_end && tiers.tier(h, end / group) == t && tiers.slot(h, end / group) == slot) {
      end = std::min(quantized_end, end + group);
    }
    const lm::Tensor& plane = c.value_codes_[static_cast<std::size_t>(t)];
    GroupAffineValueRows rows;
    rows.codes = row_ptr<uint32_t>(plane, b, slot, a);
    rows.code_stride = plane.dim(3);
    rows.params = row_ptr<uint16_t>(c.value_params_, b, h, a);
    rows.param_stride = c.value_params_.dim(3);
    rows.order = &layouts_.tiers[static_cast<std::size_t>(t)].value_order;
    rows.group = group;
    rows.n = end - a;
    accumulate_group_affine_rows(rows, {weights + (a - j0), n_queries, ld}, acc, scratch);
    a = end;
  }
  if (j1 > frontier) {
    const int64_t t0 = std::max(j0, frontier);
    attention::accumulate_plain_tile(tail_v_, b, h, t0 - frontier, j1 - frontier, {weights + (t0 - j0), n_queries, ld},
                                     acc, scratch);
  }
}

}  // namespace veloxquant
