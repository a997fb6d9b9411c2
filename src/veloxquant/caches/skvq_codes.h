#pragma once
// SKVQ's quantizer (Duanmu et al., COLM 2024, arXiv 2405.06219; caches/skvq_cache.h): one token
// row of a key or a value, its channels taken in a frozen order (channel reorder), quantized per
// token in groups of `group` consecutive channels of that order with a clipped asymmetric code.
//
// Channel reorder: a group shares one (scale, min), so a group mixing a wide channel with narrow
// ones spends its levels on the wide one. Sorting the channels by their range (max - min over a
// calibration block of rows) puts channels of similar range in the same group.
//
// Clipped dynamic quantization (the paper's rule): the group's range [min, max] is shrunk to
// [a * min, a * max] for a clip factor a in (0, 1]:
//   scale = max((a * max - m) / (2^b - 1), 1e-8),  m = a * min   (both stored as f16; the f16
//   values are the ones the codes are computed against, as KIVI's group code),
//   code  = clamp(round_half_even((x - m) / scale), 0, 2^b - 1),  x_hat = code * scale + m.
// a = 1 is exactly KIVI's group code (core/group_quant.h). With the search on, each group takes
// the factor of kClipCandidates whose reconstruction has the least squared error (ties to the
// larger factor); off, every group uses the configured factor.
//
// Row layout (u32 words): [packed_words(dim, bits) code words | one (scale, min) f16 pair per
// group], the same as eviction/row_codec.h's group-affine rows, so the SIMD tile decoder
// (attention/affine_word_rows.h) reads it.
#include <cstddef>
#include <cstdint>

#include "veloxquant/rows/group_affine_codes.h"

namespace veloxquant::skvq {

// Factors tried per group: alpha_max * (1 - 0.05 k) for k = 0 .. kClipCandidates - 1, i.e. from
// alpha_max down to half of it in steps of 5%.
constexpr int kClipCandidates = 11;
float clip_candidate(double alpha_max, int k);

struct CodeLayout {
  int dim = 0, bits = 0, group = 0;
  int64_t words = 0;   // code words per row
  int64_t groups = 0;  // (scale, min) pairs per row, one u32 each
  int64_t width() const { return words + groups; }
};
CodeLayout code_layout(int dim, int bits, int group);

// perm[p] = the channel stored at position p: channels by ascending range over rows [rows, dim]
// (f32, row-major), ties to the lower channel.
void range_order(const float* x, int64_t rows, int64_t dim, int32_t* perm);

// The stored params of a group whose values span [lo, hi], clipped at `alpha`.
GroupParams16 clip_params(float lo, float hi, int bits, float alpha);
// One group of n values clipped at `alpha`; writes n codes and returns the stored params.
GroupParams16 clip_group(const float* x, int n, int bits, float alpha, uint8_t* codes);
// Squared error of that group's reconstruction (in double, each x_hat as decode_code gives it).
double group_error(const float* x, const uint8_t* codes, int n, GroupParams16 params);

// x: `dim` floats in natural channel order -> one row of layout.width() words.
// perm: nullptr = natural order. search: try kClipCandidates factors below alpha_max.
void encode_row(const float* x, const int32_t* perm, const CodeLayout& layout, bool search, double alpha_max,
                uint32_t* row);
// One row back to natural channel order.
void decode_row(const uint32_t* row, const int32_t* perm, const CodeLayout& layout, float* x);

}  // namespace veloxquant::skvq
