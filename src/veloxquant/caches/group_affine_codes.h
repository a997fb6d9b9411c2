#pragma once
// The asymmetric min/max group code the KIVI family uses (spec §11.9, KIVI arXiv 2402.02750
// §3), in the storage form of the serving caches: b-bit codes packed in the word layout
// (core/bit_packing.h) and per-group (scale, min) kept as f16, as the KIVI paper does — half the
// parameter bytes of f32, which at group 32 and 2 bits is the difference between 3 and 4 bits
// per coordinate.
//
//   levels = 2^b - 1;  min16 = f16(min);  scale16 = f16(max((max - min16) / levels, 1e-8))
//   code = clip(round((x - min16) / scale16), 0, levels);   x^ = code * scale16 + min16  (f32)
// The parameters are rounded to f16 BEFORE the codes are chosen, so the codes are the best ones
// for the parameters actually stored. A group whose scale underflows f16 (range < ~1e-7) gets
// code 0 everywhere and decodes to min16.
#include <cstddef>
#include <cstdint>

namespace veloxquant {

struct GroupParams16 {
  uint16_t scale = 0;  // f16 bits
  uint16_t min = 0;    // f16 bits
};

// Chooses params for the `n` values at x[0], x[stride], ..., x[(n-1)*stride].
GroupParams16 fit_group(const float* x, std::size_t n, std::size_t stride, int bits);
// Codes of those values under `params`.
void encode_group(const float* x, std::size_t n, std::size_t stride, int bits, GroupParams16 params,
                  uint8_t* codes, std::size_t code_stride);
// Decodes one code.
float decode_code(uint8_t code, GroupParams16 params);

// One token row of `dim` values quantized per token in channel groups of `group` (the last
// group may be shorter: the original pads by repeating the last element, which leaves min and
// max — hence params and codes — unchanged, so no padding is stored). Words: packed_words(dim).
std::size_t token_groups(int dim, int group);
void encode_token_row(const float* x, int dim, int group, int bits, uint32_t* words, GroupParams16* params);
void decode_token_row(const uint32_t* words, const GroupParams16* params, int dim, int group, int bits,
                      float* out);

}  // namespace veloxquant
