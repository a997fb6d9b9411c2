#include "veloxquant/caches/adakv_rows.h"

#include <algorithm>
#include <array>
#include <vector>

#include "lm/kernels/attention_tiles.h"
#include "lm/kernels/simd_dot.h"
#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/attention/word_code_rows.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/caches/adakv_cache.h"

namespace veloxquant {

AdaKVRows::AdaKVRows(const AdaKVCache& cache)
    : cache_(cache),
      tail_k_(attention::PlainRows::of(cache.tail_k_)),
      tail_v_(attention::PlainRows::of(cache.tail_v_)) {}

int64_t AdaKVRows::key_dim() const { return cache_.dk_; }
int64_t AdaKVRows::value_dim() const { return cache_.dv_; }
int64_t AdaKVRows::rows(int64_t, int64_t) const { return cache_.offset_; }

namespace {

// Rows [r0, r1) of one block's codes (keys or values) of (b, h) unpacked to f32 code values
// (attention/word_code_rows.h, SIMD for every width), in natural order.
void unpack_block_codes(const std::array<lm::Tensor, 3>& planes, int tier, int64_t slot, int bits, int64_t b,
                        int64_t r0, int64_t r1, int64_t d, float* out) {
  const lm::Tensor& plane = planes[static_cast<std::size_t>(tier)];
  attention::kernels::unpack_word_rows(cache_rows::row_ptr<uint32_t>(plane, b, slot, r0), plane.dim(3), r1 - r0, d,
                                       bits, nullptr, out);
}

}  // namespace

void AdaKVRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                           float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const AdaKVCache& c = cache_;
  const int64_t d = c.dk_, frontier = c.frontier_, group = c.group_;
  const int64_t quantized_end = std::min(j1, frontier);
  if (j0 < quantized_end) {
    // Per block (one width, one (scale, min) per channel): <q, code * scale + min> =
    // <q * scale, code> + <q, min>, so the block's scales are folded into the queries once and its
    // rows scored straight from their unpacked codes (no affine pass over the tile).
    thread_local std::vector<float> tile, folded, params;
    tile.resize(static_cast<std::size_t>(group * d));
    folded.resize(static_cast<std::size_t>(n_queries * d + n_queries + 2 * d));
    params.resize(static_cast<std::size_t>(2 * d));
    float* bias = folded.data() + n_queries * d;
    float* scale = bias + n_queries;
    float* min = scale + d;
    for (int64_t a = j0; a < quantized_end;) {
      const int64_t block = a / group, end = std::min(quantized_end, (block + 1) * group);
      const int t = c.tier(b, h, block);
      unpack_block_codes(c.key_codes_, t, c.slot(b, h, block), c.bits_[static_cast<std::size_t>(t)], b, a, end, d,
                         tile.data());
      // (scale, min) interleaved per channel: widened together, then split.
      lm::kernels::simd::f16_to_f32(cache_rows::row_ptr<uint16_t>(c.key_params_, b, h, block), params.data(), 2 * d);
      for (int64_t e = 0; e < d; ++e) {
        scale[e] = params[static_cast<std::size_t>(2 * e)];
        min[e] = params[static_cast<std::size_t>(2 * e + 1)];
      }
      attention::kernels::fold_scales(prepared, n_queries, d, scale, min, folded.data(), bias);
      float* s = scores + (a - j0);
      attention::kernels::score_rows(folded.data(), d, n_queries, tile.data(), d, end - a, d, s, ld);
      for (int64_t r = 0; r < n_queries; ++r) {
        for (int64_t j = 0; j < end - a; ++j) s[r * ld + j] += bias[r];
      }
      a = end;
    }
  }
  if (j1 > frontier) {
    const int64_t t0 = std::max(j0, frontier);
    attention::score_plain_tile(tail_k_, b, h, t0 - frontier, j1 - frontier, prepared, n_queries, scores + (t0 - j0),
                                ld, scratch);
  }
}

void AdaKVRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                                int64_t ld, float* acc, attention::TileScratch& scratch) const {
  const AdaKVCache& c = cache_;
  const int64_t d = c.dv_, frontier = c.frontier_, group = c.group_, groups = c.value_groups_;
  const int64_t quantized_end = std::min(j1, frontier);
  if (j0 < quantized_end) {
    // Per token and channel group g: sum_j w_j (code_j * s_jg + m_jg) = sum_j (w_j s_jg) code_j +
    // sum_j w_j m_jg — the weights folded with each row's group scale, the codes accumulated as
    // they unpack, the mins one constant per (query, group).
    thread_local std::vector<float> tile, params, folded;
    const int64_t n_max = quantized_end - j0;
    tile.resize(static_cast<std::size_t>(group * d));
    params.resize(static_cast<std::size_t>(n_max * 2 * groups));
    folded.resize(static_cast<std::size_t>(n_queries * group));
    for (int64_t a = j0; a < quantized_end;) {
      const int64_t block = a / group, end = std::min(quantized_end, (block + 1) * group), n = end - a;
      const int t = c.tier(b, h, block);
      unpack_block_codes(c.value_codes_, t, c.slot(b, h, block), c.bits_[static_cast<std::size_t>(t)], b, a, end, d,
                         tile.data());
      // The rows' (scale, min) pairs per group, contiguous rows: one widening call.
      lm::kernels::simd::f16_to_f32(cache_rows::row_ptr<uint16_t>(c.value_params_, b, h, a), params.data(),
                                    n * 2 * groups);
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t c0 = g * group, width = std::min<int64_t>(d, c0 + group) - c0;
        for (int64_t r = 0; r < n_queries; ++r) {
          const float* w = weights + r * ld + (a - j0);
          float bias = 0.0f;
          for (int64_t j = 0; j < n; ++j) {
            const float* p = params.data() + (j * groups + g) * 2;
            folded[static_cast<std::size_t>(r * n + j)] = w[j] * p[0];
            bias += w[j] * p[1];
          }
          float* out = acc + r * d + c0;
          for (int64_t e = 0; e < width; ++e) out[e] += bias;
        }
        attention::kernels::accumulate_rows(folded.data(), n, n_queries, tile.data() + c0, d, n, width, acc + c0, d);
      }
      a = end;
    }
  }
  if (j1 > frontier) {
    const int64_t t0 = std::max(j0, frontier);
    attention::accumulate_plain_tile(tail_v_, b, h, t0 - frontier, j1 - frontier, weights + (t0 - j0), n_queries, ld,
                                     acc, scratch);
  }
}

}  // namespace veloxquant
