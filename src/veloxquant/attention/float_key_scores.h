#pragma once
// Group-affine keys scored with the query in f32 (Highway, dispatched at run time; the SIMD loop
// matches its plain scalar reference bit for bit).
//
// The sibling of integer_key_scores.h for caches whose keys the integer path's 16-bit query
// rounding costs quality: the query folded into a key group's per-channel scales stays in f32
// (fold_scales, tile_kernels.h), and each row's packed codes are widened to f32 in registers, 8 at
// a time, and fed to one FMA per query — no rounding of the query and no f32 tile of the codes:
//
//   score(r, j) = sum_e' folded[r][e'] * code_j(e') + bias[r]
//
// SmolLM2's keys have outlier channels whose scale sets the integer step of the whole folded
// query: cachegen's KL on one tinyshakespeare window went 0.110 -> 0.123 on the integer path.
#include <cstdint>

namespace veloxquant::attention::kernels {

// Whether rows of planar b-bit codes with `plane_bytes` bytes per plane take score_codes_f32
// (b in 2, 4, 8 and whole 8-byte chunks per plane).
bool can_score_codes_f32(int bits, int64_t plane_bytes);

// Rows j < n_rows of planar b-bit codes (code_rows.h: code-order position e' = k * P + p holds
// field k of byte p, P = plane_bytes), `row_stride` bytes apart, against n_q folded f32 queries in
// code order (folded + r * d, d = 8 / b * P):  scores[r * ld + j] = dot + bias[r].
// Order of the sum (the reference's): 8 lanes, lane l accumulating e' = k * P + p0 + l by FMA for
// p0 = 0, 8, ... and, within each p0, k = 0 .. 8/b - 1; the lanes then added as
// ((l0 + l2) + (l1 + l3)) + ((l4 + l6) + (l5 + l7)); then the bias.
void score_codes_f32(const uint8_t* bytes, int64_t row_stride, int64_t n_rows, int64_t plane_bytes, int bits,
                     const float* folded, const float* bias, int64_t n_q, float* scores, int64_t ld);

namespace scalar {
void score_codes_f32(const uint8_t* bytes, int64_t row_stride, int64_t n_rows, int64_t plane_bytes, int bits,
                     const float* folded, const float* bias, int64_t n_q, float* scores, int64_t ld);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
