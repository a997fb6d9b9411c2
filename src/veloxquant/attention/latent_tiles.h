#pragma once
// The arithmetic of the true-latent caches (caches/latent_rows.h: kvtc, palu) at the machine's
// full vector width, each kernel bit-identical to the plain form the cache used before, so the
// speed-up changes no stored code, score or output:
//
//   score_latent_rows       = lm::kernels::tiles::score_rows (the same FMA chain per lane of
//                             8 and the same reduction tree), with two queries per 512-bit
//                             vector on AVX-512: the shared kernel is capped at 8 lanes.
//   accumulate_latent_rows  = lm::kernels::tiles::accumulate_rows (each (query, column) sum is
//                             its own FMA chain over the rows, so any lane width gives the same
//                             bits), 16 columns per vector on AVX-512.
//   project_latents         z = U x in double, summed column after column as the scalar loop
//                             does (products of floats are exact in double, so FMA or not makes
//                             no difference), eight tokens per vector, one per lane.
//   reconstruct_latent_rows x = mu + sum_i z_i u_i in f32 with a separate multiply and add per
//                             component (the rounding of the scalar loop compiled without FMA),
//                             columns per vector.
//
// On targets below AVX-512 the first two call the shared kernels (the results are theirs by
// construction); the last two have SIMD forms on every target. Scalar references below.
#include <cstdint>

namespace veloxquant::attention::kernels {

// scores[r * ld + j] = sum_e q[r * q_stride + e] * rows[j * row_stride + e], bit-identical to
// lm::kernels::tiles::score_rows with the same arguments.
void score_latent_rows(const float* q, int64_t q_stride, int64_t n_q, const float* rows, int64_t row_stride,
                       int64_t n_rows, int64_t d, float* scores, int64_t ld);

// acc[r * acc_stride + e] += sum_j w[r * ld + j] * rows[j * row_stride + e], bit-identical to
// lm::kernels::tiles::accumulate_rows.
void accumulate_latent_rows(const float* w, int64_t ld, int64_t n_q, const float* rows, int64_t row_stride,
                            int64_t n_rows, int64_t d, float* acc, int64_t acc_stride);

// z[t * r + i] = float(sum_{c < w} double(basis[i * basis_stride + c]) * double(x[t * w + c])),
// summed in order of c from 0.0, for t < n, i < r.
void project_latents(const float* basis, int64_t basis_stride, int64_t r, const float* x, int64_t w, int64_t n,
                     float* z);

// out[t * out_stride + c] = mu[c] + z[t * r + 0] * basis[0][c] + ... + z[t * r + r - 1] * basis[r - 1][c]
// accumulated left to right, each step a rounded product then a rounded sum, for t < n, c < w
// (basis row i at basis + i * basis_stride).
void reconstruct_latent_rows(const float* basis, int64_t basis_stride, int64_t r, const float* mu, const float* z,
                             int64_t w, int64_t n, float* out, int64_t out_stride);

namespace scalar {
void project_latents(const float* basis, int64_t basis_stride, int64_t r, const float* x, int64_t w, int64_t n,
                     float* z);
void reconstruct_latent_rows(const float* basis, int64_t basis_stride, int64_t r, const float* mu, const float* z,
                             int64_t w, int64_t n, float* out, int64_t out_stride);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
