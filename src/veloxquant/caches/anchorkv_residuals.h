#pragma once
// anchorkv's residual rows (caches/anchorkv_cache.h: per row and stream, d codes of b bits packed
// low bits first, read in plane order — attention/code_rows.h) scored and accumulated straight
// from their codes, for a decode step's 1-3 queries.
//
// Why: at 4k, copying a tile's residual rows side by side, unpacking them to f32 planes and
// reading those back (score_rows, accumulate_rows) was ~20% of a 1-thread decode step. On
// AVX-512, for the default 2-bit residuals of 64 elements, a row's 16 code bytes are widened once
// in registers and each 16-element plane is one shift, mask and convert away.
//
// Bit-identical to the reference (each row unpacked with attention::kernels::unpack_planes, then
// lm::kernels::tiles::score_rows / accumulate_rows): the scores run score_rows' FMA chain per lane
// and its reduction tree (two rows per 512-bit vector, as svdq_latent_scores.h), the sums one FMA
// chain per (query, element) over the rows in order, as accumulate_rows. Other widths, sizes,
// targets and query counts run the reference itself.
#include <cstdint>

namespace veloxquant {

// Whether the two kernels below run fused for b-bit rows of `plane_bytes` bytes on this machine.
bool residual_codes_fuse(int bits, int64_t plane_bytes);

// dots[r * ld + i] = <q_r, row i's planes> for r < n_q, i < n (q in plane order, d = 8 / b *
// plane_bytes floats at q + r * q_stride). scratch: n * d floats for the reference.
void score_residual_codes(const uint8_t* const* rows, int64_t n, int64_t plane_bytes, int bits, const float* q,
                          int64_t q_stride, int64_t n_q, float* dots, int64_t ld, float* scratch);

// sums[r * sums_stride + e] += sum over i < n (in order) of w[r * ld + i] * row i's plane value e.
void accumulate_residual_codes(const uint8_t* const* rows, int64_t n, int64_t plane_bytes, int bits, const float* w,
                               int64_t ld, int64_t n_q, float* sums, int64_t sums_stride, float* scratch);

namespace scalar {
// The reference: unpack_planes per row into scratch, then the shared f32 tile kernels.
void score_residual_codes(const uint8_t* const* rows, int64_t n, int64_t plane_bytes, int bits, const float* q,
                          int64_t q_stride, int64_t n_q, float* dots, int64_t ld, float* scratch);
void accumulate_residual_codes(const uint8_t* const* rows, int64_t n, int64_t plane_bytes, int bits, const float* w,
                               int64_t ld, int64_t n_q, float* sums, int64_t sums_stride, float* scratch);
}  // namespace scalar

}  // namespace veloxquant
