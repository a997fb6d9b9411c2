#pragma once
// One-byte block scales on a logarithmic grid (turboquant_block's scale_format=log8,
// docs/methods/turboquant_block.md): code n in 1..255 stands for 2^((n - kLog8Bias) / 16),
// rounded to f16, and code 0 for a scale of 0 (an all-zero block). A step of 2^(1/16) (4.4 %)
// costs a block code about what f16's 11-bit mantissa does (measured offline on SmolLM2's rows:
// attention KL 0.0507 -> 0.0516 on q3, docs/frontier.md) and frees one byte per block, which
// the key split spends on wider codes.
//
// Range: 2^(-159/16) ~ 1.0e-3 .. 2^(95/16) ~ 61. Block scales are a block's largest rotated
// coordinate over the outer level (< 1): coordinates above ~61 saturate to the largest scale,
// blocks below ~1e-3 take the smallest (their error stays below ~1e-3 per coordinate). The
// value is rounded to f16 so that attention may hand it to kernels that read f16 scales.
#include <cstdint>

namespace veloxquant::quant {

inline constexpr int kLog8Bias = 160;

// The f16 bits of code n's scale (0 for n = 0).
uint16_t log8_scale_f16(uint8_t n);
// The same as f32.
float log8_scale(uint8_t n);
// The code whose scale is nearest to s in the log domain (1..255; 0 for s <= 0 or not finite).
uint8_t nearest_log8(float s);
// All 256 scales as f32 and as f16 bits (index = code), for kernels that look them up.
const float* log8_scale_table();
const uint16_t* log8_scale_f16_table();

}  // namespace veloxquant::quant
