// The tile decoder of product-VQ rows (pvq::decode_rows, the attention path) against decode_row
// (one row at a time through the generic code_at reads), bit for bit, for every specialised and
// generic sub width, code width and shared / per-position books, with rows that end their buffer
// exactly (the 12-bit 64-bit loads must stay inside a row).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "veloxquant/caches/product_vq.h"

namespace veloxquant::pvq {
namespace {

// Random codes for n_sub sub-vectors in each of `rows` packed rows of `bytes` bytes.
void put_random_codes(std::vector<uint8_t>& packed, int64_t rows, int64_t bytes, int n_sub, int bits,
                      std::mt19937& rng) {
  for (int64_t j = 0; j < rows; ++j) {
    for (int t = 0; t < n_sub; ++t) {
      put_code(packed.data() + j * bytes, t, bits, static_cast<uint32_t>(rng()) & ((1u << bits) - 1u));
    }
  }
}

TEST(ProductVq, TileDecodeEqualsRowDecode) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  for (int sub : {2, 3, 4, 8, 16}) {
    for (int bits : {4, 5, 8, 12}) {
      for (bool shared : {true, false}) {
        for (int n_sub : {1, 3, 5, 8, 16, 17}) {
          ProductCodebook book = make_codebook(sub * n_sub, sub, bits, shared);
          book.words.assign_zeros(book.word_floats());
          for (std::size_t i = 0; i < book.word_floats(); ++i) book.words[i] = real(rng);
          const int64_t rows = 11, bytes = book.row_bytes(), dim = book.dim();
          std::vector<uint8_t> packed(static_cast<std::size_t>(rows * bytes), 0);
          put_random_codes(packed, rows, bytes, n_sub, bits, rng);
          std::vector<float> tile(static_cast<std::size_t>(rows * dim)), one(tile.size());
          decode_rows(book, packed.data(), bytes, rows, tile.data());
          for (int64_t j = 0; j < rows; ++j) decode_row(book, packed.data() + j * bytes, one.data() + j * dim);
          ASSERT_EQ(tile, one) << "sub " << sub << " bits " << bits << " shared " << shared << " n_sub " << n_sub;
        }
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::pvq
