#pragma once
// Asymmetric group quantization (KIVI, arXiv 2402.02750; the original's rule, spec §11.9):
//   levels = 2^b - 1;  scale = max((max - min) / levels, 1e-8);
//   code = clip(round_half_even((x - min) / scale), 0, levels);  x_hat = code * scale + min.
// A group of G elements keeps (scale, min) in fp16 (4 bytes), so b-bit codes cost b + 32/G
// bits per element: KIVI-2 with G = 32 is 3.0 bpe (anchors §1.3). The fp16 values are what
// both encoding and decoding use, so x_hat is exactly what a reader of the stored bytes gets.
// A short last group simply has fewer elements (the original pads by repeating the last
// element, which changes neither min nor max, so the codes are the same).
//
// Layouts: per token (values) groups run along the channels of one row; per channel (keys)
// groups run along the tokens of one channel. Codes are one uint8 per element; pack them with
// bit_packing.h.
//
// Also here: int8 per-token quantization for the standalone caches' values (spec §2.4):
//   scale = max(max|v| / 127, 1e-8) in fp16; code = clip(round(v / scale), -127, 127).
#include <cstddef>
#include <cstdint>

namespace veloxquant::core {

struct GroupParams {
  uint16_t scale_f16;
  uint16_t min_f16;
};

// One group of `count` elements read at x[0], x[stride], ...; codes written with the same stride.
GroupParams quantize_group(const float* x, std::size_t count, std::size_t stride, int bits, uint8_t* codes);
void dequantize_group(const uint8_t* codes, std::size_t count, std::size_t stride, GroupParams params, float* out);

std::size_t groups_per_row(std::size_t dim, std::size_t group);  // ceil(dim / group)

// Per token: x [rows, dim]; params [rows, ceil(dim / group)].
void quantize_per_token(const float* x, std::size_t rows, std::size_t dim, int bits, std::size_t group, uint8_t* codes,
                        GroupParams* params);
void dequantize_per_token(const uint8_t* codes, std::size_t rows, std::size_t dim, std::size_t group,
                          const GroupParams* params, float* out);

// Per channel: x [tokens, dim]; groups of `group` tokens; params [ceil(tokens / group), dim].
void quantize_per_channel(const float* x, std::size_t tokens, std::size_t dim, int bits, std::size_t group,
                          uint8_t* codes, GroupParams* params);
void dequantize_per_channel(const uint8_t* codes, std::size_t tokens, std::size_t dim, std::size_t group,
                            const GroupParams* params, float* out);

// int8 per token: returns the fp16 scale bits.
uint16_t quantize_int8_row(const float* v, std::size_t dim, int8_t* codes);
void dequantize_int8_row(const int8_t* codes, std::size_t dim, uint16_t scale_f16, float* out);

}  // namespace veloxquant::core
