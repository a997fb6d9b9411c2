// The word-layout tile unpacker against its scalar reference, and the reference against
// core::unpack_words (the storage's own unpacker), for every width, with and without levels.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "veloxquant/attention/word_code_rows.h"
#include "veloxquant/core/bit_packing.h"

namespace veloxquant::attention::kernels {
namespace {

TEST(WordCodeRows, EqualTheScalarReferenceAndTheStorageUnpacker) {
  std::mt19937 rng(5);
  for (int bits = 1; bits <= 8; ++bits) {
    const int n_levels = 1 << bits;
    std::vector<float> levels(static_cast<std::size_t>(n_levels));
    std::uniform_real_distribution<float> level(-2.0f, 2.0f);
    for (float& l : levels) l = level(rng);
    for (int64_t n : {5, 32, 64, 67}) {
      const int64_t rows = 9, words = static_cast<int64_t>(core::packed_words(static_cast<std::size_t>(n), bits));
      const int64_t stride = words + 2;  // rows need not be back to back
      std::vector<uint32_t> packed(static_cast<std::size_t>(rows * stride), 0xFFFFFFFFu);
      std::vector<uint8_t> raw(static_cast<std::size_t>(rows * n));
      std::uniform_int_distribution<int> code(0, n_levels - 1);
      for (int64_t j = 0; j < rows; ++j) {
        for (int64_t i = 0; i < n; ++i) raw[static_cast<std::size_t>(j * n + i)] = static_cast<uint8_t>(code(rng));
        core::pack_words(raw.data() + j * n, static_cast<std::size_t>(n), bits, packed.data() + j * stride);
      }
      for (const float* table : {static_cast<const float*>(nullptr), static_cast<const float*>(levels.data())}) {
        std::vector<float> simd(static_cast<std::size_t>(rows * n)), plain(simd.size());
        unpack_word_rows(packed.data(), stride, rows, n, bits, table, simd.data());
        scalar::unpack_word_rows(packed.data(), stride, rows, n, bits, table, plain.data());
        ASSERT_EQ(simd, plain) << "bits " << bits << " n " << n << (table ? " levels" : " codes");
        for (std::size_t e = 0; e < raw.size(); ++e) {
          ASSERT_EQ(plain[e], table ? table[raw[e]] : static_cast<float>(raw[e])) << "bits " << bits << " at " << e;
        }
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels
