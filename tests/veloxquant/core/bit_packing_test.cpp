// Packing must round-trip exactly; the word layout is the original's (LSB-first, floor(32/b)
// per uint32), the dense layout wastes nothing and equals the word bytes for b in {1,2,4,8}.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "veloxquant/core/bit_packing.h"
#include "veloxquant/core/rng.h"
#include "veloxquant/errors.h"

namespace vc = veloxquant::core;

TEST(BitPacking, SizesFollowTheLayouts) {
  EXPECT_EQ(vc::indices_per_word(3), 10u);
  EXPECT_EQ(vc::packed_words(128, 1), 4u);
  EXPECT_EQ(vc::packed_words(128, 2), 8u);
  EXPECT_EQ(vc::packed_words(128, 3), 13u);  // 10 per word: 52 bytes where 48 would do
  EXPECT_EQ(vc::packed_words(128, 5), 22u);  // 6 per word
  EXPECT_EQ(vc::packed_words(128, 8), 32u);
  EXPECT_EQ(vc::dense_bytes(128, 3), 48u);
  EXPECT_EQ(vc::dense_bytes(128, 5), 80u);
  EXPECT_EQ(vc::dense_bytes(10, 3), 4u);
  EXPECT_EQ(vc::dense_bytes(1, 7), 1u);
}

TEST(BitPacking, WordLayoutIsLsbFirstByHand) {
  // b=2: indices 1,2,3,0 -> bits 01 10 11 00 from the LSB = 0b00111001 = 0x39.
  const uint8_t idx[] = {1, 2, 3, 0, 3};
  uint32_t w[1] = {0xffffffffu};
  vc::pack_words(idx, 5, 2, w);
  EXPECT_EQ(w[0], 0x39u | (3u << 8));
  // b=3: 10 per word, the 11th index starts the next word.
  std::vector<uint8_t> eleven(11, 7);
  uint32_t w3[2];
  vc::pack_words(eleven.data(), 11, 3, w3);
  EXPECT_EQ(w3[0], (1u << 30) - 1u);  // bits 30, 31 unused
  EXPECT_EQ(w3[1], 7u);
}

TEST(BitPacking, DenseLayoutIsAnLsbFirstBitStreamByHand) {
  // b=3: 5, 6, 7 -> bits 101 | 110 | 111 = 0b111110101 -> bytes 0xF5, 0x01.
  const uint8_t idx[] = {5, 6, 7};
  uint8_t out[2] = {0, 0};
  vc::pack_dense(idx, 3, 3, out);
  EXPECT_EQ(out[0], 0xF5);
  EXPECT_EQ(out[1], 0x01);
}

TEST(BitPacking, RoundTripsExactlyForEveryWidthAndLength) {
  vc::Rng rng(9);
  for (int bits = 1; bits <= 8; ++bits)
    for (size_t n : {1u, 7u, 31u, 64u, 100u, 128u, 129u}) {
      std::vector<uint8_t> idx(n), back(n, 0xAA), back2(n, 0xAA);
      for (auto& v : idx) v = static_cast<uint8_t>(rng.below(1u << bits));
      std::vector<uint32_t> words(vc::packed_words(n, bits));
      vc::pack_words(idx.data(), n, bits, words.data());
      vc::unpack_words(words.data(), n, bits, back.data());
      ASSERT_EQ(back, idx) << "words b=" << bits << " n=" << n;
      std::vector<uint8_t> dense(vc::dense_bytes(n, bits));
      vc::pack_dense(idx.data(), n, bits, dense.data());
      vc::unpack_dense(dense.data(), n, bits, back2.data());
      ASSERT_EQ(back2, idx) << "dense b=" << bits << " n=" << n;
    }
}

TEST(BitPacking, DenseEqualsWordBytesForPowerOfTwoWidths) {
  vc::Rng rng(10);
  for (int bits : {1, 2, 4, 8}) {
    std::vector<uint8_t> idx(128);
    for (auto& v : idx) v = static_cast<uint8_t>(rng.below(1u << bits));
    std::vector<uint32_t> words(vc::packed_words(128, bits));
    vc::pack_words(idx.data(), 128, bits, words.data());
    std::vector<uint8_t> dense(vc::dense_bytes(128, bits));
    vc::pack_dense(idx.data(), 128, bits, dense.data());
    ASSERT_EQ(dense.size(), words.size() * 4);
    // Little-endian bytes of the words (assembled explicitly, independent of host order).
    for (size_t i = 0; i < dense.size(); ++i)
      ASSERT_EQ(dense[i], static_cast<uint8_t>(words[i / 4] >> (8 * (i % 4)))) << bits;
  }
}

TEST(BitPacking, HighBitsOfIndicesAreMasked) {
  const uint8_t idx[] = {0xFF, 0x00};
  uint8_t out[1] = {0};
  vc::pack_dense(idx, 2, 2, out);
  EXPECT_EQ(out[0], 0x03);
}

TEST(BitPacking, BadWidthThrowsNamingIt) {
  uint8_t idx[1] = {0}, out[4];
  try {
    vc::pack_dense(idx, 1, 9, out);
    FAIL();
  } catch (const veloxquant::QuantizerConfigError& e) {
    EXPECT_NE(std::string(e.what()).find('9'), std::string::npos);
  }
  EXPECT_THROW(vc::packed_words(4, 0), veloxquant::QuantizerConfigError);
}
