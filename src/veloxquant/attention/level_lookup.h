#pragma once
// Codes read through a level table, in place: x[i] = levels[int(x[i])] for a tile of unpacked
// codes (CodeOrder::unpack_rows writes codes as f32). Non-uniform quantizers (kvquant's fitted
// levels, caches/fitted_levels.h) score and accumulate exactly as KIVI once their codes are
// levels; this is the step between. SIMD: the table sits in one register when 2^bits fits the
// vector's lanes (a permute per vector), else each vector's levels are gathered. Equal to the
// scalar loop below element for element (a lookup does no arithmetic).
#include <cstdint>

namespace veloxquant::attention::kernels {

// x[i] = levels[static_cast<int>(x[i])] for i < n; every x[i] is an integer in [0, n_levels).
void lookup_levels(float* x, int64_t n, const float* levels, int n_levels);

namespace scalar {
void lookup_levels(float* x, int64_t n, const float* levels, int n_levels);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
