#pragma once
// The 8-bit encoder's clip-grid search on evenly spaced levels (2c - 255) / 256 (turboquant_block
// from 7 bits on: the q8 preset's keys and values), all candidate scales at once.
//
// BlockLloydQuantizer::encode_block tries 15 scales per block of 32 and for each finds every
// value's nearest level and sums the squared error: ~7,000 instructions per block, per decode
// step 12 blocks per layer, as much as attention over ~150 native rows. On these levels the
// nearest code has a closed form, and the trials are independent, so here the trials are SIMD
// lanes: each lane adds its errors in element order, exactly the sum the one-trial loop makes,
// so the encoder picks the same scale and the same codes.
#include <cstdint>

namespace veloxquant::quant {

// The nearest of the levels (2c - 255) / 256 to v, ties down: the number of midpoints
// (k - 127) / 128 strictly below v, clamp(ceil(128 v) + 127, 0, 255) (128 v is exact in f32).
// v must not be NaN.
uint8_t even_byte_code(float v);

// errors[t] = sum over i in order of (double(x[i]) - double(s_t) * level(code(x[i] * (1 / s_t))))^2
// for each candidate scale s_t = scales[t] > 0 (n_scales <= 16, n values).
void even_byte_trial_errors(const float* x, int n, const float* scales, int n_scales, double* errors);

namespace scalar {
void even_byte_trial_errors(const float* x, int n, const float* scales, int n_scales, double* errors);
}  // namespace scalar

}  // namespace veloxquant::quant
