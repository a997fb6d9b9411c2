#pragma once
// amc's latent codes of a tile decoded coordinate-major (caches/amc_rows.h): rows of r dense
// LSB-first codes of 8 or 4 bits with one (scale, min) pair per row (amc's r = 22 or 4 coordinates
// fit one group of amc_group_size), out[i * n + j] = float(code_ji) * scale_j + min_j — a rounded
// multiply, then a rounded add, as the plain loop compiled for the baseline. The SIMD targets
// decode a vector of rows per coordinate (each row's bytes read by a gather from a padded copy)
// instead of one code at a time; every target gives the scalar reference's floats bit for bit.
#include <cstdint>

namespace veloxquant {

// rows: n rows `row_stride` bytes apart, each ceil(r * bits / 8) bytes of codes; pairs: f32
// (scale, min) of row j at pairs[2 j], pairs[2 j + 1]; out: r * n floats. bits is 8 or 4.
void amc_latent_columns(const uint8_t* rows, int64_t row_stride, int64_t n, int64_t r, int bits, const float* pairs,
                        float* out);

namespace scalar {
void amc_latent_columns(const uint8_t* rows, int64_t row_stride, int64_t n, int64_t r, int bits, const float* pairs,
                        float* out);
}  // namespace scalar

}  // namespace veloxquant
