#pragma once
// Bit packing of b-bit indices (b = 1..8). Two layouts:
//
//  Word layout (the original's, = mx.quantize): each row goes LSB-first into uint32 words,
//    floor(32/b) indices per word, the last word zero-padded; a row of n indices takes
//    ceil(n / floor(32/b)) words. For b = 3, 5, 6, 7 the top 32 mod b bits of every word
//    are wasted (b = 3: 10 per word, 2 bits idle).
//
//  Dense layout: one LSB-first bit stream, index i at bits [i*b, (i+1)*b), stored in bytes;
//    a row takes ceil(n*b/8) bytes and wastes nothing. For b in {1, 2, 4, 8} and n*b a
//    multiple of 32 its bytes equal the little-endian bytes of the word layout.
//
// Indices must be < 2^b; higher bits are masked off.
#include <cstddef>
#include <cstdint>

namespace veloxquant::core {

// Throws QuantizerConfigError naming `bits` unless 1 <= bits <= 8.
void check_pack_bits(int bits);

std::size_t indices_per_word(int bits);             // floor(32 / b)
std::size_t packed_words(std::size_t n, int bits);  // ceil(n / floor(32 / b))
std::size_t dense_bytes(std::size_t n, int bits);   // ceil(n * b / 8)

void pack_words(const uint8_t* idx, std::size_t n, int bits, uint32_t* words);
void unpack_words(const uint32_t* words, std::size_t n, int bits, uint8_t* idx);

void pack_dense(const uint8_t* idx, std::size_t n, int bits, uint8_t* out);
void unpack_dense(const uint8_t* in, std::size_t n, int bits, uint8_t* idx);

}  // namespace veloxquant::core
