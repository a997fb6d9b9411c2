#pragma once
// XQuant's group quantization along the token axis (spec §4.3 "Group quantization details";
// the original's quantizers/xquant.py): for each channel, `group` consecutive tokens share one
// asymmetric (scale, min) pair.
//   levels = 2^b - 1;  scale = max((max - min) / levels, 1e-8);
//   code = clip(round((x - min) / scale), 0, levels);  x_hat = code * scale + min.
// All arithmetic is fp32 and the parameters are kept in fp32, as the original does. The
// original pads the token axis to a whole number of groups by repeating the last row; the
// repeated rows change neither min nor max, so a short last group here simply has fewer rows
// and the codes are the same. round() is half-to-even (numpy / mlx round).
//
// A reuse layer keeps the anchor's codes and fits only its own (scale, min) to its own data:
// fit_token_group_params does that half on its own.
#include <cstdint>

namespace veloxquant::cross_layer {

struct TokenGroupParams {
  float scale;
  float min;
};

// Number of token groups for `rows` rows: ceil(rows / group).
int64_t token_group_count(int64_t rows, int64_t group);

// x: [rows, dim] row-major. params: [token_group_count(rows, group), dim].
void fit_token_group_params(const float* x, int64_t rows, int64_t dim, int64_t group, int bits,
                            TokenGroupParams* params);
// Fits the params and writes one code per element (codes: [rows, dim]).
void quantize_token_groups(const float* x, int64_t rows, int64_t dim, int64_t group, int bits, uint8_t* codes,
                           TokenGroupParams* params);
// out[t, d] = codes[t, d] * scale + min of (t / group, d).
void dequantize_token_groups(const uint8_t* codes, int64_t rows, int64_t dim, int64_t group,
                             const TokenGroupParams* params, float* out);
// The same for rows [first, first + n) of a run whose row 0 starts token group 0: out[t, d] =
// codes[t, d] * scale + min of ((first + t) / group, d), codes and out holding those n rows.
void dequantize_token_group_rows(const uint8_t* codes, int64_t first, int64_t n, int64_t dim, int64_t group,
                                 const TokenGroupParams* params, float* out);

}  // namespace veloxquant::cross_layer
