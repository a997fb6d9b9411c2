#pragma once
// The inner loops of the quantizers, in two versions each:
//   core::scalar::*  the plain reference, written for clarity;
//   core::simd::*    Highway kernels with runtime dispatch (SSE4/AVX2/AVX-512/NEON/...),
// tested equal to the reference (tests/veloxquant/core/simd_kernels_test.cpp). Quantizers call
// the simd versions; the scalar ones exist to pin down what the fast ones must compute.
#include <cstddef>
#include <cstdint>

namespace veloxquant::core {

namespace scalar {
float dot(const float* a, const float* b, std::size_t n);
// (a, b) <- (a + b, a - b): one Walsh-Hadamard butterfly over n pairs.
void butterfly(float* a, float* b, std::size_t n);
// The Walsh-Hadamard butterflies of strides 1, 2 and 4 (the first three stages of fwht) over
// x[0, n), n a multiple of 8.
void fwht_short_strides(float* x, std::size_t n);
// x <- x * s
void scale(float* x, float s, std::size_t n);
// out <- a * b elementwise (the randomized Hadamard's +-1 diagonal).
void multiply(const float* a, const float* b, float* out, std::size_t n);
// sum over p < n of lut[p * 256 + bytes[p]]: scoring packed codes by byte lookup tables.
float lut_sum(const float* lut, const uint8_t* bytes, std::size_t n);
// idx[i] = number of boundaries strictly below x[i] (boundaries sorted ascending, nb < 256):
// the scalar-codebook quantize rule of the original ("count of midpoints strictly below").
void count_below(const float* x, std::size_t n, const float* boundaries, std::size_t nb, uint8_t* idx);
}  // namespace scalar

namespace simd {
float dot(const float* a, const float* b, std::size_t n);
void butterfly(float* a, float* b, std::size_t n);
void fwht_short_strides(float* x, std::size_t n);
void scale(float* x, float s, std::size_t n);
void multiply(const float* a, const float* b, float* out, std::size_t n);
float lut_sum(const float* lut, const uint8_t* bytes, std::size_t n);
void count_below(const float* x, std::size_t n, const float* boundaries, std::size_t nb, uint8_t* idx);
// Name of the instruction set the dispatcher picked on this machine (for reports).
const char* target_name();
}  // namespace simd

}  // namespace veloxquant::core
