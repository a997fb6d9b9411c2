#pragma once
// turboquant_block's encoder's clip-grid search (quant/block_lloyd_quant.h), all candidate scales
// at once: on evenly spaced 8-bit levels (2c - 255) / 256 (the q8 preset's keys and values) and on
// any levels of 1-4 bits (q4's and q3's values, q5's, q3's split key groups).
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

// The same for 2^bits <= 16 levels of any spacing (Lloyd-Max: turboquant_block's 3- and 4-bit
// values and q3's split key groups): the code of x * (1 / s_t) is the number of boundaries
// strictly below it (BlockLloydQuantizer::nearest), its level picked by one compare and select
// per boundary in every lane.
bool can_batch_level_trials(int bits);
void level_trial_errors(const float* x, int n, const float* scales, int n_scales, const float* levels,
                        const float* boundaries, int bits, double* errors);

namespace scalar {
void even_byte_trial_errors(const float* x, int n, const float* scales, int n_scales, double* errors);
void level_trial_errors(const float* x, int n, const float* scales, int n_scales, const float* levels,
                        const float* boundaries, int bits, double* errors);
}  // namespace scalar

}  // namespace veloxquant::quant
