#pragma once
// SKVQ's clip-factor search for one quantization group (caches/skvq_codes.h): the group coded at
// each of the kClipCandidates factors alpha_max * (1 - 0.05 k), and the codes and (scale, min) of
// the one whose reconstruction has the least squared error kept (ties to the larger factor, i.e.
// the lower k). This is the encoder's hot loop: 11 candidates x the group's values, a division,
// a rounding and a double-precision error term each — every row of a prefill passes through it.
//
// The SIMD version (Highway, dispatched at run time) puts the candidates in the lanes, not the
// values: for each value x_i in order, every candidate's code, reconstruction and error term
// e_k += (x_hat_k - x_i)^2 are formed at once. Each lane then sums its error terms in the same
// order, with the same operations (an f32 divide, round half to even, clamp, a multiply then an
// add in f32, a subtract, multiply and add in f64) as the scalar reference, so both pick the
// same candidate and write the same codes and parameters bit for bit (tested on every target).
#include <cstdint>

#include "veloxquant/rows/group_affine_codes.h"

namespace veloxquant::skvq {

// Groups longer than this take the scalar loop (the SIMD one keeps every candidate's codes of
// the group on the stack); SKVQ's default group is 32.
constexpr int kMaxSimdGroup = 128;

// n values of one group (n >= 1): writes n codes, returns the chosen (scale, min).
GroupParams16 search_clip_group(const float* x, int n, int bits, double alpha_max, uint8_t* codes);

namespace scalar {
// The reference: clip_group and group_error per candidate (skvq_codes.h), strict < in order.
GroupParams16 search_clip_group(const float* x, int n, int bits, double alpha_max, uint8_t* codes);
}  // namespace scalar

}  // namespace veloxquant::skvq
