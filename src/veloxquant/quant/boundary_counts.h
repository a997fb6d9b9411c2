#pragma once
// Codes of a block under one candidate scale, the inner loop of BlockLloydQuantizer's scale search
// (block_lloyd_quant.cpp: 15 scales tried per block of every new row, the largest cost of a
// decode step's encode). code = the number of boundaries strictly below x * inv, as the scalar
// bucket search gives it (NaN: 0).
//
// SIMD (Highway, dispatched at run time; 8 f32 lanes): the 2^b levels are cut into 8 groups of
// G = 2^b / 8; the 7 boundaries between groups (held in registers) give each lane its group g by
// 7 compares, and the G - 1 boundaries inside the group are looked up by g with one lane permute
// each and compared: code = g * G + (those below). 3 bits: 7 compares per 8 values; 5 bits: 7 + 3
// lookups and compares, against a bucket search with a data-dependent loop per value.
#include <cstdint>

namespace veloxquant::quant {

// boundaries: 2^bits - 1 ascending values (bits 1..8); n values of x; codes[i] as above.
void count_boundaries_below(const float* x, int n, float inv, const float* boundaries, int bits, uint8_t* codes);

namespace scalar {
void count_boundaries_below(const float* x, int n, float inv, const float* boundaries, int bits, uint8_t* codes);
}  // namespace scalar

}  // namespace veloxquant::quant
