#include "veloxquant/caches/latent_rows.h"

#include <algorithm>

#include "veloxquant/attention/affine_part_planes.h"
#include "veloxquant/attention/code_key_scores.h"
#include "veloxquant/attention/code_row_scores.h"
#include "veloxquant/attention/code_value_sums.h"
#include "veloxquant/attention/latent_pair_tiles.h"
#include "veloxquant/attention/latent_tiles.h"
#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {
// Latent rows decoded and scored (or accumulated) per block of this many: a whole 64-row tile
// of 192-float latents (kvtc over SmolLM2's three heads) is 48 KiB, past L1, and every query of
// the group re-read it from L2; 16 rows (12 KiB) stay in L1 while the 9 queries read them.
// A multiple of 8, the f32 scorer's pass, so the scores are those of the whole tile.
constexpr int64_t kLatentBlock = 16;

const uint8_t* end_of(const lm::Tensor& codes) {
  return reinterpret_cast<const uint8_t*>(codes.raw_data()) + codes.nbytes();
}

// Whether every (batch, group) of `side` holds bit-field codes of at most 256 components whose
// rows the VBMI byte decoder reads in one load (at most 64 bytes): the AMX kernels' condition.
bool byte_decodable_codes(const LatentSide& side) {
  if (side.max_rank > 256) return false;
  for (int64_t b = 0; b < side.ranks.dim(0); ++b) {
    for (int64_t g = 0; g < side.ranks.dim(1); ++g) {
      LatentCodec::IntegerKeys codes;
      if (!side.codec->code_values(b, g, &codes) || codes.layout->row_bytes > 64) return false;
    }
  }
  return true;
}
}  // namespace

int64_t LatentSide::rank(int64_t b, int64_t g) const { return row_ptr<int32_t>(ranks, b, g, 0)[0]; }
const float* LatentSide::basis_row(int64_t b, int64_t g, int64_t i) const { return row_ptr<float>(basis, b, g, i); }
const float* LatentSide::mean_row(int64_t b, int64_t g) const { return row_ptr<float>(mean, b, g, 0); }
const uint8_t* LatentSide::code_row(int64_t b, int64_t g, int64_t j) const { return row_ptr<uint8_t>(codes, b, g, j); }

LatentRows::LatentRows(const LatentSide& keys, const LatentSide& values, int64_t heads_per_group, int64_t rows)
    : keys_(keys),
      values_(values),
      heads_per_group_(heads_per_group),
      rows_(rows),
      pair_tiles_(attention::kernels::pair_tiles_direct()) {
  if (!keys.codes.defined() || !values.codes.defined() || !keys.ranks.defined() || !values.ranks.defined()) return;
  bool all = true;
  for (int64_t b = 0; b < keys.ranks.dim(0) && all; ++b) {
    for (int64_t g = 0; g < keys.ranks.dim(1) && all; ++g) {
      LatentCodec::PlaneRows k, v;
      all = keys.codec->plane_rows(b, g, &k) && values.codec->plane_rows(b, g, &v);
      if (all) {
        key_width_ = std::max(key_width_, k.layout->width);
        value_width_ = std::max(value_width_, v.layout->width);
      }
    }
  }
  planes_ = all;
  if (planes_) return;
  // Integer value sums where they run on AMX and every group's value rows are bit-field codes
  // the VBMI byte decoder reads in one load (rows of at most 64 bytes: kvtc up to 512 bits).
  const bool code_values = attention::kernels::code_value_sums_fast() && byte_decodable_codes(values);
  if (code_values) value_code_stride_ = (values.max_rank + 63) / 64 * 64;
  bool integer = true;
  for (int64_t b = 0; b < keys.ranks.dim(0) && integer; ++b) {
    for (int64_t g = 0; g < keys.ranks.dim(1) && integer; ++g) {
      LatentCodec::IntegerKeys k;
      integer = keys.codec->integer_keys(b, g, &k);
    }
  }
  if (integer) {
    code_stride_ = (keys.max_rank + 31) / 32 * 32;
    return;
  }
  // The keys' integer scores on AMX, under the same conditions as the value sums': 22-bit query
  // pieces (attention/code_key_scores.h) in place of the f32 latents (rounding-level).
  const bool code_keys = attention::kernels::code_key_scores_fast() && byte_decodable_codes(keys);
  if (code_keys) amx_key_stride_ = (keys.max_rank + 63) / 64 * 64;
}

int64_t LatentRows::key_dim() const {
  if (planes_) return key_width_;
  if (amx_key_stride_ > 0) return attention::kernels::code_key_query_floats(amx_key_stride_);
  return code_stride_ > 0 ? attention::kernels::code_query_floats(code_stride_) : keys_.max_rank;
}

void LatentRows::queries_to_codes(const float* projected, int64_t batch, int64_t q_heads, int64_t n, float* out) const {
  const int64_t groups = keys_.ranks.dim(1), per_group = q_heads / groups, rk = keys_.max_rank, dim = key_dim();
  if (amx_key_stride_ > 0) {
    // One serial for the call and the query's row in it name each prepared query (the kernel
    // keeps a block's tiles while the same queries come back: every tile of this call).
    const uint64_t serial = attention::kernels::next_code_key_serial();
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t qh = 0; qh < q_heads; ++qh) {
        const int64_t g = qh / per_group;
        LatentCodec::IntegerKeys k;
        keys_.codec->code_values(b, g, &k);
        for (int64_t i = 0; i < n; ++i) {
          const int64_t at = (b * q_heads + qh) * n + i;
          attention::kernels::prepare_code_key_query(projected + at * rk, k.step, k.lo, keys_.rank(b, g),
                                                     amx_key_stride_, serial, static_cast<uint32_t>(at),
                                                     out + at * dim);
        }
      }
    }
    return;
  }
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t qh = 0; qh < q_heads; ++qh) {
      const int64_t g = qh / per_group;
      LatentCodec::IntegerKeys k;
      keys_.codec->integer_keys(b, g, &k);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t at = (b * q_heads + qh) * n + i;
        attention::kernels::prepare_code_query(projected + at * rk, k.step, k.lo, keys_.rank(b, g), code_stride_,
                                               out + at * dim);
      }
    }
  }
}

namespace {
// One projected query into the key planes' layout: each coordinate at its plane position, and
// per part the sum of the part's coordinates where the part's minimum multiplies it.
void query_to_planes(const float* q, const LatentCodec::PlaneRows& k, float* dst) {
  const attention::kernels::AffinePlaneLayout& layout = *k.layout;
  for (int64_t p = 0; p < k.n_parts; ++p) {
    float sum = 0.0f;
    for (int64_t c = k.parts[p].first; c < k.parts[p].first + k.parts[p].count; ++c) {
      dst[layout.position[static_cast<std::size_t>(c)]] = q[c];
      sum += q[c];
    }
    dst[layout.params + 2 * p + 1] = sum;  // min_p * sum of the part's query
  }
}
}  // namespace

void LatentRows::queries_to_planes(const float* projected, int64_t batch, int64_t q_heads, int64_t n,
                                   float* out) const {
  const int64_t groups = keys_.ranks.dim(1), per_group = q_heads / groups, rk = keys_.max_rank;
  std::fill(out, out + batch * q_heads * n * key_width_, 0.0f);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t qh = 0; qh < q_heads; ++qh) {
      LatentCodec::PlaneRows k;
      keys_.codec->plane_rows(b, qh / per_group, &k);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t at = (b * q_heads + qh) * n + i;
        query_to_planes(projected + at * rk, k, out + at * key_width_);
      }
    }
  }
}

void LatentRows::latents_from_planes(const float* acc, int64_t batch, int64_t q_heads, int64_t n,
                                     float* latents) const {
  const int64_t groups = values_.ranks.dim(1), per_group = q_heads / groups, rv = values_.max_rank;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t qh = 0; qh < q_heads; ++qh) {
      LatentCodec::PlaneRows v;
      values_.codec->plane_rows(b, qh / per_group, &v);
      const attention::kernels::AffinePlaneLayout& layout = *v.layout;
      const int64_t r = values_.rank(b, qh / per_group);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t at = (b * q_heads + qh) * n + i;
        const float* src = acc + at * value_width_;
        float* dst = latents + at * rv;
        for (int64_t c = 0; c < r; ++c) {
          const std::size_t cs = static_cast<std::size_t>(c);
          dst[c] = src[layout.position[cs]] + src[layout.params + 2 * static_cast<int64_t>(layout.part_of[cs]) + 1];
        }
        std::fill(dst + r, dst + rv, 0.0f);
      }
    }
  }
}

void LatentRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                            float* scores, int64_t ld, attention::TileScratch& scratch) const {
  if (planes_) {
    const int64_t g = h / heads_per_group_, n = j1 - j0;
    LatentCodec::PlaneRows k;
    keys_.codec->plane_rows(b, g, &k);
    const int64_t w = k.layout->width;
    float* tile = scratch.f32(static_cast<std::size_t>(n * w));
    attention::kernels::decode_affine_part_planes(keys_.code_row(b, g, j0), keys_.row_stride(), n, end_of(keys_.codes),
                                                  k.parts, k.n_parts, *k.layout, tile, w);
    attention::kernels::score_rows(prepared, key_width_, n_queries, tile, w, n, w, scores, ld);
    return;
  }
  if (amx_key_stride_ > 0) {
    const int64_t g = h / heads_per_group_, n = j1 - j0;
    LatentCodec::IntegerKeys k;
    keys_.codec->code_values(b, g, &k);
    // The kernel reads whole blocks of 16 rows; the rows past n are left as the scratch holds
    // them (their scores are not written).
    uint8_t* codes = scratch.u8(static_cast<std::size_t>((n + 15) / 16 * 16 * amx_key_stride_));
    attention::kernels::decode_bit_field_bytes(keys_.code_row(b, g, j0), keys_.row_stride(), n, *k.layout, codes,
                                               amx_key_stride_);
    attention::kernels::score_code_keys(prepared, key_dim(), n_queries, codes, amx_key_stride_, n, scores, ld);
    return;
  }
  if (code_stride_ > 0) {
    const int64_t g = h / heads_per_group_, n = j1 - j0;
    LatentCodec::IntegerKeys k;
    keys_.codec->integer_keys(b, g, &k);
    auto* codes = reinterpret_cast<int16_t*>(scratch.u8(static_cast<std::size_t>(n * code_stride_) * sizeof(int16_t)));
    attention::kernels::decode_bit_field_codes(keys_.code_row(b, g, j0), keys_.row_stride(), n, *k.layout, codes,
                                               code_stride_);
    attention::kernels::score_code_rows(prepared, key_dim(), n_queries, codes, code_stride_, n, scores, ld);
    return;
  }
  const int64_t g = h / heads_per_group_, r = keys_.rank(b, g);
  float* latent = scratch.f32(static_cast<std::size_t>(kLatentBlock * r));
  // Where the pair-tile scorer runs directly (AVX-512) and the codec decodes to its layout (kvtc),
  // the whole passes of 8 rows of a block go through it: the same scores (bit for bit), fewer
  // loads per multiply-add and no scalar tail for a rank off a multiple of 8.
  const bool pairs = pair_tiles_ && kLatentBlock >= 8;
  for (int64_t a = j0; a < j1; a += kLatentBlock) {
    const int64_t n = std::min(kLatentBlock, j1 - a), whole = pairs ? n - n % 8 : 0;
    if (whole > 0 && keys_.codec->decode_pair_tile(b, g, keys_.code_row(b, g, a), keys_.row_stride(), whole, latent)) {
      attention::kernels::score_pair_tile(prepared, keys_.max_rank, n_queries, latent, whole, r, scores + (a - j0), ld);
      if (whole == n) continue;
      keys_.codec->decode_rows(b, g, keys_.code_row(b, g, a + whole), keys_.row_stride(), n - whole, latent);
      attention::kernels::score_latent_rows(prepared, keys_.max_rank, n_queries, latent, r, n - whole, r,
                                            scores + (a + whole - j0), ld);
      continue;
    }
    keys_.codec->decode_rows(b, g, keys_.code_row(b, g, a), keys_.row_stride(), n, latent);
    attention::kernels::score_latent_rows(prepared, keys_.max_rank, n_queries, latent, r, n, r, scores + (a - j0), ld);
  }
}

void LatentRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                                 int64_t ld, float* acc, attention::TileScratch& scratch) const {
  if (planes_) {
    const int64_t g = h / heads_per_group_, n = j1 - j0;
    LatentCodec::PlaneRows v;
    values_.codec->plane_rows(b, g, &v);
    const int64_t w = v.layout->width;
    float* tile = scratch.f32(static_cast<std::size_t>(n * w));
    attention::kernels::decode_affine_part_planes(values_.code_row(b, g, j0), values_.row_stride(), n,
                                                  end_of(values_.codes), v.parts, v.n_parts, *v.layout, tile, w);
    attention::kernels::accumulate_rows(weights, ld, n_queries, tile, w, n, w, acc, value_width_);
    return;
  }
  if (value_code_stride_ > 0) {
    const int64_t g = h / heads_per_group_, n = j1 - j0;
    LatentCodec::IntegerKeys v;
    values_.codec->code_values(b, g, &v);
    uint8_t* codes = scratch.u8(static_cast<std::size_t>(n * value_code_stride_));
    attention::kernels::decode_bit_field_bytes(values_.code_row(b, g, j0), values_.row_stride(), n, *v.layout, codes,
                                               value_code_stride_);
    const attention::kernels::CodeValueRows rows{codes, value_code_stride_, n, values_.rank(b, g), v.step, v.lo};
    attention::kernels::accumulate_code_values({weights, n_queries, ld}, rows, acc, values_.max_rank);
    return;
  }
  const int64_t g = h / heads_per_group_, r = values_.rank(b, g);
  float* latent = scratch.f32(static_cast<std::size_t>(kLatentBlock * r));
  for (int64_t a = j0; a < j1; a += kLatentBlock) {
    const int64_t n = std::min(kLatentBlock, j1 - a);
    values_.codec->decode_rows(b, g, values_.code_row(b, g, a), values_.row_stride(), n, latent);
    attention::kernels::accumulate_latent_rows(weights + (a - j0), ld, n_queries, latent, r, n, r, acc,
                                               values_.max_rank);
  }
}

void project_queries(const LatentSide& keys, int64_t kv_heads, int64_t heads_per_group, const float* queries,
                     int64_t batch, int64_t q_heads, int64_t n, float* projected) {
  const int64_t d = keys.dim, rk = keys.max_rank, per_kv = q_heads / kv_heads;
  std::fill(projected, projected + batch * q_heads * n * rk, 0.0f);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < kv_heads; ++h) {
      const int64_t g = h / heads_per_group, local = h % heads_per_group;
      const int64_t at = (b * q_heads + h * per_kv) * n;
      // The basis rows restricted to this head's D columns act as r "rows" to score the queries
      // of all the kv head's query heads on (each row read once for them; the same sums).
      attention::kernels::score_latent_rows(queries + at * d, d, per_kv * n, keys.basis_row(b, g, 0) + local * d,
                                            keys.width, keys.rank(b, g), d, projected + at * rk, rk);
    }
  }
}

void reconstruct_outputs(const LatentSide& values, int64_t kv_heads, int64_t heads_per_group, const float* latents,
                         int64_t batch, int64_t q_heads, int64_t n, float* out) {
  const int64_t d = values.dim, rv = values.max_rank, per_kv = q_heads / kv_heads;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < kv_heads; ++h) {
      const int64_t g = h / heads_per_group, local = h % heads_per_group;
      const int64_t at = (b * q_heads + h * per_kv) * n;
      const float* mu = values.mean_row(b, g) + local * d;
      for (int64_t i = 0; i < per_kv * n; ++i) std::copy_n(mu, d, out + (at + i) * d);
      // out_i += sum_c a_i[c] * U_h[c]: the latent sums are the weights, the basis rows the rows
      // (all the kv head's query heads in one call; each output column its own FMA chain).
      attention::kernels::accumulate_latent_rows(latents + at * rv, rv, per_kv * n,
                                                 values.basis_row(b, g, 0) + local * d, values.width, values.rank(b, g),
                                                 d, out + at * d, d);
    }
  }
}

}  // namespace veloxquant
