#pragma once
// A static order-0 rANS coder (range asymmetric numeral systems, Duda 2013) over byte symbols,
// written for cachegen's code streams (caches/cachegen_cache.h). One stream = one frequency
// table + the coded bytes; the table is quantized to a total of 2^kProbBits so both sides agree
// exactly on it, and the coder then spends -log2(freq / 2^kProbBits) bits per symbol (plus at
// most 4 bytes of final state), i.e. within a fraction of a percent of the order-0 entropy of the
// stream when the table is the stream's own counts.
//
// State: 32 bits, kept in [kLow, 256 * kLow) by byte-wise renormalisation. The encoder walks the
// symbols backwards and writes bytes backwards, so the decoder reads forwards.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace veloxquant::core {

constexpr int kProbBits = 12;
constexpr uint32_t kProbScale = 1u << kProbBits;
constexpr uint32_t kRansLow = 1u << 23;

// Frequencies summing to kProbScale from symbol counts over an alphabet of `alphabet` (<= 256)
// symbols: every symbol that occurs gets at least 1, absent ones 0. Throws base::InvalidArgument
// when no symbol occurs.
std::vector<uint16_t> normalized_frequencies(const uint32_t* counts, int alphabet);

// Encodes symbols[0..n) (each < freqs.size(), each with a nonzero frequency) and appends the
// coded bytes to `out`. Returns the number of bytes appended.
std::size_t rans_encode(const uint8_t* symbols, std::size_t n, const uint16_t* freqs, int alphabet,
                        std::vector<uint8_t>& out);

// Decodes n symbols from bytes[0..size). Throws base::FormatError when the bytes run out or the
// final state is not the encoder's initial one (a corrupted stream).
void rans_decode(const uint8_t* bytes, std::size_t size, const uint16_t* freqs, int alphabet, std::size_t n,
                 uint8_t* symbols);

// The order-0 entropy of the stream in bits: sum over symbols of -count * log2(count / n) (what
// the original printed as cachegen's estimated size).
double order0_entropy_bits(const uint32_t* counts, int alphabet);

}  // namespace veloxquant::core
