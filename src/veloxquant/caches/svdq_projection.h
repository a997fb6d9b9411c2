#pragma once
// svdq's latent coordinates of a block of keys (caches/svdq_cache.h): z[t][i] = <basis row i, k_t>,
// each a double-precision sum over the key's channels in order, rounded to f32 once — the flush's
// arithmetic. The products of two f32 values are exact in f64, so a fused multiply-add rounds
// exactly as the product-then-add of the scalar loop: the SIMD version (Highway, dispatched at run
// time) keeps 8 latent channels per vector (the basis transposed once per call into the caller's
// scratch) and agrees with the scalar reference bit for bit. Every 32 decode steps a flush projects
// 32 keys on 40 directions per kv head; the scalar loop's dependent double adds made that about
// 1/20 of svdq's decode time.
#include <cstdint>

namespace veloxquant {

// basis: [coded, dim] f32 row-major; keys: [rows, dim] f32; z: [rows, coded].
// scratch: at least svdq_projection_scratch(coded, dim) doubles.
void project_latent_rows(const float* basis, int64_t coded, int64_t dim, const float* keys, int64_t rows,
                         double* scratch, float* z);
int64_t svdq_projection_scratch(int64_t coded, int64_t dim);

namespace scalar {
void project_latent_rows(const float* basis, int64_t coded, int64_t dim, const float* keys, int64_t rows, float* z);
}  // namespace scalar

}  // namespace veloxquant
