#include "veloxquant/core/bit_packing.h"

#include <cstring>
#include <string>

#include "veloxquant/errors.h"

namespace veloxquant::core {

void check_pack_bits(int bits) {
  if (bits < 1 || bits > 8)
    throw QuantizerConfigError("bit packing: bits must be in 1..8, got " + std::to_string(bits));
}

std::size_t indices_per_word(int bits) {
  check_pack_bits(bits);
  return 32 / static_cast<std::size_t>(bits);
}

std::size_t packed_words(std::size_t n, int bits) {
  const std::size_t per = indices_per_word(bits);
  return (n + per - 1) / per;
}

std::size_t dense_bytes(std::size_t n, int bits) {
  check_pack_bits(bits);
  return (n * static_cast<std::size_t>(bits) + 7) / 8;
}

void pack_words(const uint8_t* idx, std::size_t n, int bits, uint32_t* words) {
  const std::size_t per = indices_per_word(bits);
  const uint32_t mask = (1u << bits) - 1u;
  const std::size_t nw = packed_words(n, bits);
  for (std::size_t w = 0; w < nw; ++w) {
    uint32_t word = 0;
    const std::size_t begin = w * per;
    const std::size_t end = begin + per < n ? begin + per : n;
    for (std::size_t i = begin; i < end; ++i)
      word |= (static_cast<uint32_t>(idx[i]) & mask) << (bits * static_cast<int>(i - begin));
    words[w] = word;
  }
}

namespace {
// unpack_words for a width known at compile time: word by word, its fields by constant shifts
// (the general loop's division and remainder by a run-time count per element cost more than the
// shifts; attention over word-packed codes unpacks every row of every tile).
template <int kBits>
void unpack_words_of(const uint32_t* words, std::size_t n, uint8_t* idx) {
  constexpr std::size_t kPer = 32 / kBits;
  constexpr uint32_t kMask = (1u << kBits) - 1u;
  std::size_t i = 0;
  for (; i + kPer <= n; i += kPer) {
    const uint32_t word = words[i / kPer];
    for (std::size_t k = 0; k < kPer; ++k) idx[i + k] = static_cast<uint8_t>((word >> (kBits * k)) & kMask);
  }
  if (i < n) {
    const uint32_t word = words[i / kPer];
    for (std::size_t k = 0; i + k < n; ++k) idx[i + k] = static_cast<uint8_t>((word >> (kBits * k)) & kMask);
  }
}
}  // namespace

void unpack_words(const uint32_t* words, std::size_t n, int bits, uint8_t* idx) {
  check_pack_bits(bits);
  switch (bits) {
    case 1:
      return unpack_words_of<1>(words, n, idx);
    case 2:
      return unpack_words_of<2>(words, n, idx);
    case 3:
      return unpack_words_of<3>(words, n, idx);
    case 4:
      return unpack_words_of<4>(words, n, idx);
    case 5:
      return unpack_words_of<5>(words, n, idx);
    case 6:
      return unpack_words_of<6>(words, n, idx);
    case 7:
      return unpack_words_of<7>(words, n, idx);
    default:
      return unpack_words_of<8>(words, n, idx);
  }
}

void pack_dense(const uint8_t* idx, std::size_t n, int bits, uint8_t* out) {
  check_pack_bits(bits);
  const uint32_t mask = (1u << bits) - 1u;
  if (bits == 8) {
    std::memcpy(out, idx, n);
    return;
  }
  // A bit accumulator: append b bits at the top, flush whole bytes from the bottom.
  uint32_t acc = 0;
  int filled = 0;
  std::size_t o = 0;
  for (std::size_t i = 0; i < n; ++i) {
    acc |= (static_cast<uint32_t>(idx[i]) & mask) << filled;
    filled += bits;
    while (filled >= 8) {
      out[o++] = static_cast<uint8_t>(acc);
      acc >>= 8;
      filled -= 8;
    }
  }
  if (filled > 0) out[o] = static_cast<uint8_t>(acc);
}

void unpack_dense(const uint8_t* in, std::size_t n, int bits, uint8_t* idx) {
  check_pack_bits(bits);
  const uint32_t mask = (1u << bits) - 1u;
  switch (bits) {  // the common widths never straddle a byte
    case 8:
      std::memcpy(idx, in, n);
      return;
    case 4:
      for (std::size_t i = 0; i < n; ++i) idx[i] = static_cast<uint8_t>((in[i >> 1] >> ((i & 1) * 4)) & 0xf);
      return;
    case 2:
      for (std::size_t i = 0; i < n; ++i) idx[i] = static_cast<uint8_t>((in[i >> 2] >> ((i & 3) * 2)) & 0x3);
      return;
    case 1:
      for (std::size_t i = 0; i < n; ++i) idx[i] = static_cast<uint8_t>((in[i >> 3] >> (i & 7)) & 0x1);
      return;
    default:
      break;
  }
  // b = 3, 5, 6, 7: every 8 indices fill b whole bytes; one 64-bit word of them gives all 8 by
  // shifts (prefill decodes q3's 3-bit values and key groups row by row through here: the
  // per-index window below was ~8% of its profile).
  const std::size_t whole = n / 8;
  const auto b = static_cast<std::size_t>(bits);
  for (std::size_t g = 0; g < whole; ++g) {
    uint64_t word = 0;
    for (std::size_t k = 0; k < b; ++k) word |= static_cast<uint64_t>(in[g * b + k]) << (8 * k);
    for (std::size_t i = 0; i < 8; ++i) idx[8 * g + i] = static_cast<uint8_t>((word >> (i * b)) & mask);
  }
  // The rest: index i sits at bit i*b and spans at most two bytes (bit offset <= 7, width <= 7),
  // so a 16-bit window read at byte i*b/8 holds it whole.
  const std::size_t total = dense_bytes(n, bits);
  for (std::size_t i = 8 * whole; i < n; ++i) {
    const std::size_t bit = i * static_cast<std::size_t>(bits);
    const std::size_t byte = bit / 8;
    const uint32_t window = in[byte] | (byte + 1 < total ? static_cast<uint32_t>(in[byte + 1]) << 8 : 0u);
    idx[i] = static_cast<uint8_t>((window >> (bit % 8)) & mask);
  }
}

}  // namespace veloxquant::core
