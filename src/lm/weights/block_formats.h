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
inline constexpr int kQK5_1 = 32;
inline constexpr int kQK4_NL = 32;       // IQ4_NL block size
inline constexpr int kQK_K = 256;        // super-block size of the k-quants
inline constexpr int kKScaleBytes = 12;  // Q4_K: 8 six-bit scales + 8 six-bit mins

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

// Q5_1: x = d * q + m with 5-bit q split as in Q5_0.
struct BlockQ5_1 {
  uint16_t d;  // f16 scale
  uint16_t m;  // f16 minimum
  uint8_t qh[4];
  uint8_t qs[kQK5_1 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

// IQ4_NL: x = d * kIQ4Values[q] with 4-bit q in the nibble order of Q4_0: a non-uniform
// 16-level codebook instead of q - 8.
struct BlockIQ4_NL {
  uint16_t d;  // f16
  uint8_t qs[kQK4_NL / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18);

// The IQ4_NL / IQ4_XS codebook (ggml's kvalues_iq4nl), in code order.
inline constexpr int8_t kIQ4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

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

// Q2_K: 256 elements in 16 sub-blocks of 16; sub-block j: x = d*(scales[j] & 15)*q -
// dmin*(scales[j] >> 4) with 2-bit q. Each half of 128 elements uses 32 qs bytes: element
// 32s + l of the half is bits 2s..2s+1 of qs[l] (s = 0..3).
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;     // f16 super-block scale of the scales
  uint16_t dmin;  // f16 super-block scale of the mins
};
static_assert(sizeof(BlockQ2_K) == 84);

// Q3_K: 256 elements in 16 sub-blocks of 16; x = d * (sc[j] - 32) * q with q in [-4, 3]:
// the low two bits as in Q2_K's qs, and q -= 4 where the element's hmask bit is clear
// (element 32b + l of the super-block has its bit at bit b of hmask[l]). The 16 six-bit
// scales are packed into 12 bytes (see unpack_q3_k_scale).
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[kKScaleBytes];
  uint16_t d;  // f16
};
static_assert(sizeof(BlockQ3_K) == 110);

// Q5_K: Q4_K with a fifth bit: sub-block j: x = d*sc[j]*q - dmin*mn[j] (scales packed as in
// Q4_K), the low four bits of element 32j + l in the nibble order of Q4_K, its fifth bit at
// bit j of qh[l].
struct BlockQ5_K {
  uint16_t d;     // f16
  uint16_t dmin;  // f16
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// IQ4_XS: 256 elements in 8 sub-blocks of 32; sub-block j: x = d * (ls[j] - 32) *
// kIQ4Values[q], six-bit ls[j] = low four bits from scales_l (nibble j&1 of byte j/2) and
// high two bits from bits 2j of scales_h; sub-block j's codes are qs[16j..16j+16) in the
// nibble order of IQ4_NL.
struct BlockIQ4_XS {
  uint16_t d;  // f16
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockIQ4_XS) == 136);

// The six-bit scale of Q3_K sub-block j (0..15), before subtracting 32: its low four bits
// are nibble j/8 of byte j%8, its top two bits are bits 2*(j/4) of byte 8 + j%4.
inline int unpack_q3_k_scale(const uint8_t* scales, int j) {
  const int low = (scales[j % 8] >> (4 * (j / 8))) & 0x0f;
  const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 0x03;
  return low | (high << 4);
}

// The six-bit scale of IQ4_XS sub-block j (0..7), before subtracting 32.
inline int unpack_iq4_xs_scale(const BlockIQ4_XS& block, int j) {
  const int low = (block.scales_l[j / 2] >> (4 * (j % 2))) & 0x0f;
  const int high = (block.scales_h >> (2 * j)) & 0x03;
  return low | (high << 4);
}

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
