#pragma once
// On-disk block layouts of the GGML quantized formats this host computes with. The layouts
// are fixed by the GGUF files themselves (ggml-common.h defines them); the static_asserts pin
// the byte sizes so a struct that drifted would not compile. All fields are little-endian and
// the structs contain only byte-sized or 16-bit members, so they have no padding.
#include <cstdint>

namespace lm {

inline constexpr int kQK4_0 = 32;
inline constexpr int kQK4_1 = 32;
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK5_0 = 32;
inline constexpr int kQK_K = 256;          // super-block size of the k-quants
inline constexpr int kKScaleBytes = 12;    // Q4_K: 8 six-bit scales + 8 six-bit mins

// Q4_0: x = d * (q - 8); low nibbles hold elements 0..15, high nibbles 16..31.
struct BlockQ4_0 {
  uint16_t d;  // f16
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// Q4_1: x = d * q + m; same nibble order as Q4_0.
struct BlockQ4_1 {
  uint16_t d;  // f16 scale
  uint16_t m;  // f16 minimum
  uint8_t qs[kQK4_1 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

// Q5_0: x = d * (q - 16) with 5-bit q: the low four bits in qs (nibble order of Q4_0), the
// fifth bit of element j in bit j of qh read as one little-endian u32.
struct BlockQ5_0 {
  uint16_t d;  // f16
  uint8_t qh[4];
  uint8_t qs[kQK5_0 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

// Q8_0: x = d * q.
struct BlockQ8_0 {
  uint16_t d;  // f16
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34);

// Q4_K: 256 elements in 8 sub-blocks of 32; sub-block j: x = d*sc[j]*q - dmin*mn[j] with
// six-bit sc/mn packed into `scales` (see unpack_q4_k_scale). Each 32 bytes of qs hold two
// sub-blocks: low nibbles the first, high nibbles the second.
struct BlockQ4_K {
  uint16_t d;     // f16 super-block scale of the scales
  uint16_t dmin;  // f16 super-block scale of the mins
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q6_K: 256 elements in 16 sub-blocks of 16; x = d * scales[j] * (q - 32) with 6-bit q split
// into 4 low bits (ql) and 2 high bits (qh). Each half of 128 elements uses 64 ql bytes and
// 32 qh bytes, laid out as four interleaved groups of 32 (see dequantize_row_q6_k).
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;  // f16
};
static_assert(sizeof(BlockQ6_K) == 210);

// The six-bit scale and min of Q4_K sub-block j (0..7): the first four are the low six bits
// of bytes 0..3 (scales) and 4..7 (mins); the last four take their low four bits from bytes
// 8..11 and their top two bits from the spare high bits of bytes 0..7.
inline void unpack_q4_k_scale(const uint8_t* scales, int j, uint8_t& scale, uint8_t& min) {
  if (j < 4) {
    scale = scales[j] & 63;
    min = scales[j + 4] & 63;
  } else {
    scale = static_cast<uint8_t>((scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4));
    min = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

}  // namespace lm
