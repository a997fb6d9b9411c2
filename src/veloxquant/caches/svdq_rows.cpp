#include "veloxquant/caches/svdq_rows.h"

#include "base/half.h"
#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {

// One group's n dense b-bit codes (LSB first) to latent values code * scale + min. A code lies in
// one byte when b divides 8 (1, 2, 4, 8), else it may straddle two: read the second byte only
// then, so the last code of a row never reads past it.
// Widths that divide 8: 8 / B codes per byte, unrolled per byte (the common schedules' widths).
template <int B>
inline void decode_byte_codes(const uint8_t* codes, int64_t n, const float* scale, const float* min, float* out) {
  constexpr int kPerByte = 8 / B;
  constexpr uint32_t kMask = (1u << B) - 1u;
  int64_t i = 0;
  for (; i + kPerByte <= n; i += kPerByte) {
    const uint32_t byte = codes[i / kPerByte];
    for (int k = 0; k < kPerByte; ++k) {
      out[i + k] = static_cast<float>((byte >> (k * B)) & kMask) * scale[i + k] + min[i + k];
    }
  }
  for (; i < n; ++i) {
    const uint32_t byte = codes[i / kPerByte];
    out[i] = static_cast<float>((byte >> ((i % kPerByte) * B)) & kMask) * scale[i] + min[i];
  }
}

inline void decode_dense_group(const uint8_t* codes, int64_t n, int bits, const float* scale, const float* min,
                               float* out) {
  switch (bits) {
    case 8: return decode_byte_codes<8>(codes, n, scale, min, out);
    case 4: return decode_byte_codes<4>(codes, n, scale, min, out);
    case 2: return decode_byte_codes<2>(codes, n, scale, min, out);
    case 1: return decode_byte_codes<1>(codes, n, scale, min, out);
    default: break;
  }
  const uint32_t mask = (1u << bits) - 1u;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t bit = i * bits;
    const int shift = static_cast<int>(bit & 7);
    uint32_t word = codes[bit >> 3];
    if (shift + bits > 8) word |= static_cast<uint32_t>(codes[(bit >> 3) + 1]) << 8;
    out[i] = static_cast<float>((word >> shift) & mask) * scale[i] + min[i];
  }
}

}  // namespace

SvdqRows::SvdqRows(const lm::Tensor& codes, const lm::Tensor& params, const lm::Tensor& basis,
                   const lm::Tensor& values, const SvdqLayout& layout, int64_t rows, int group)
    : codes_(codes), params_(params), basis_(basis), values_(attention::PlainRows::of(values)), layout_(layout),
      rows_(rows), group_(group) {}

void SvdqRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                          float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t coded = layout_.coded, dk = layout_.dim, n = j1 - j0;
  // Projected queries [n_queries, coded] and the tile's latent rows [n, coded], side by side.
  float* projected = scratch.f32_second(static_cast<std::size_t>(n_queries * coded));
  attention::kernels::score_rows(prepared, dk, n_queries, row_ptr<float>(basis_, b, h, 0), dk, coded, dk, projected,
                                 coded);
  float* latent = scratch.f32(static_cast<std::size_t>(n * coded + 2 * coded));
  float* scale = latent + n * coded;  // the current block's (scale, min) per coded channel, in f32
  float* min = scale + coded;
  int64_t block = -1;
  for (int64_t j = j0; j < j1; ++j) {
    if (j / group_ != block) {  // a tile spans at most a few blocks: convert each block's params once
      block = j / group_;
      const uint16_t* params = row_ptr<uint16_t>(params_, b, h, block);
      for (int64_t i = 0; i < coded; ++i) {
        scale[i] = base::f16_to_f32(params[2 * i]);
        min[i] = base::f16_to_f32(params[2 * i + 1]);
      }
    }
    const uint8_t* row = row_ptr<uint8_t>(codes_, b, h, j);
    float* z = latent + (j - j0) * coded;
    for (const SvdqGroup& g : layout_.groups) {
      decode_dense_group(row + g.byte_offset, g.channels, g.bits, scale + g.first, min + g.first, z + g.first);
    }
  }
  attention::kernels::score_rows(projected, coded, n_queries, latent, coded, n, coded, scores, ld);
}

void SvdqRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                               int64_t ld, float* acc, attention::TileScratch& scratch) const {
  attention::accumulate_plain_tile(values_, b, h, j0, j1, weights, n_queries, ld, acc, scratch);
}

}  // namespace veloxquant
