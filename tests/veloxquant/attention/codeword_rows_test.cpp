// Product-VQ rows scored and accumulated from their codewords: the SIMD loops against their
// scalar reference (bit for bit), against the decode-then-tile-kernel path they replace (bit for
// bit), and against plain f64 dot products over the decoded rows (within float rounding), on
// every SIMD target this machine runs (AVX-512's 16-lane loops for calls of many queries, the
// 8-lane loops elsewhere).
#define HWY_WANT_AVX3_DL  // so that the target list names AVX3_DL too
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "lm/kernels/attention_tiles.h"
#include "veloxquant/attention/codeword_rows.h"
#include "veloxquant/caches/product_vq.h"
#include "support/simd_targets.h"

namespace veloxquant::attention::kernels {
namespace {

// Runs `check` once per SIMD target of this machine that runs the codeword loops (AVX2 and wider:
// codeword_rows_supported), with the dispatch pinned to it.
template <typename F>
void on_every_target(F&& check) {
  test_support::for_each_simd_target([&](const char* target) {
    if (codeword_rows_supported()) check(target);
  });
}

std::vector<float> normals(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A trained-looking book (random words) and random packed rows of `book`'s geometry, row j at
// j * stride (stride > row bytes leaves bytes the kernels must not read as codes).
struct Rows {
  pvq::ProductCodebook book;
  std::vector<uint8_t> codes;
  int64_t stride = 0;
};

Rows random_rows(int dim, int sub, int bits, bool shared, int64_t n, int64_t stride_pad, std::mt19937& rng) {
  Rows r;
  r.book = pvq::make_codebook(dim, sub, bits, shared);
  r.book.words = pvq::FloatArray(normals(r.book.word_floats(), rng));
  r.stride = r.book.row_bytes() + stride_pad;
  r.codes.assign(static_cast<std::size_t>(n * r.stride), 0);
  std::uniform_int_distribution<uint32_t> code(0, (1u << bits) - 1), junk(0, 255);
  for (int64_t j = 0; j < n; ++j) {
    uint8_t* row = r.codes.data() + j * r.stride;
    for (int t = 0; t < r.book.n_sub; ++t) pvq::put_code(row, t, bits, code(rng));
    for (int64_t e = r.book.row_bytes(); e < r.stride; ++e) row[e] = static_cast<uint8_t>(junk(rng));
  }
  return r;
}

// One (rows, queries, row padding) case of the key scorer: the scalar reference near exact dots
// over the decoded rows; every target equal to it bit for bit, and to the decoded tile's scores
// when the rows are whole blocks of 8.
void check_key_scores(int64_t n_rows, int64_t n_q, int64_t pad, std::mt19937& rng) {
  const Rows rows = random_rows(64, 4, 12, true, n_rows, pad, rng);
  const int64_t q_stride = 70, ld = n_rows + 3;
  const std::vector<float> q = normals(static_cast<std::size_t>(n_q * q_stride), rng);
  const CodewordKeys keys{rows.codes.data(), rows.stride, n_rows, rows.book.words.data()};
  std::vector<float> ref(static_cast<std::size_t>(n_q * ld), -7.0f);
  scalar::score_codeword_keys(keys, q.data(), q_stride, n_q, ref.data(), ld);
  std::vector<float> decoded(static_cast<std::size_t>(n_rows * 64));
  pvq::decode_rows(rows.book, rows.codes.data(), rows.stride, n_rows, decoded.data());
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t j = 0; j < n_rows; ++j) {
      double exact = 0.0, mag = 0.0;
      for (int e = 0; e < 64; ++e) {
        const double term =
            double{q[static_cast<std::size_t>(r * q_stride + e)]} * decoded[static_cast<std::size_t>(j * 64 + e)];
        exact += term;
        mag += std::fabs(term);
      }
      ASSERT_NEAR(ref[static_cast<std::size_t>(r * ld + j)], exact, 1e-5 * mag + 1e-6)
          << "rows " << n_rows << " r " << r << " j " << j;
    }
  }
  on_every_target([&](const char* target) {
    std::vector<float> simd(ref.size(), -7.0f), tiled(ref.size(), -7.0f);
    score_codeword_keys(keys, q.data(), q_stride, n_q, simd.data(), ld);
    // The path it replaces: decode the tile, then the shared tile kernel.
    lm::kernels::tiles::score_rows(q.data(), q_stride, n_q, decoded.data(), 64, n_rows, 64, tiled.data(), ld);
    for (int64_t r = 0; r < n_q; ++r) {
      for (int64_t j = 0; j < ld; ++j) {
        const std::size_t i = static_cast<std::size_t>(r * ld + j);
        // Past n_rows: untouched (-7 in both).
        ASSERT_EQ(simd[i], ref[i]) << target << " rows " << n_rows << " q " << n_q << " r " << r << " j " << j;
        if (j < n_rows && n_rows % 8 == 0) {
          ASSERT_EQ(simd[i], tiled[i]) << target << " rows " << n_rows << " r " << r << " j " << j;
        }
      }
    }
  });
}

TEST(CodewordRows, KeyScoresMatchScalarDecodedTilesAndExactDots) {
  if (!codeword_rows_supported()) GTEST_SKIP() << "no 8-lane target here";
  std::mt19937 rng(11);
  for (const int64_t n_rows : {int64_t{1}, int64_t{5}, int64_t{8}, int64_t{13}, int64_t{64}}) {
    // 8 and more: AVX-512's row-pair loop, 48 per pass (50: a second pass of 2; odd counts leave
    // the last query pair half empty).
    for (const int64_t n_q : {1, 2, 3, 7, 8, 9, 17, 48, 50}) {
      for (const int64_t pad : {int64_t{0}, int64_t{5}}) {
        check_key_scores(n_rows, n_q, pad, rng);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// One (dim, rows, queries) case of the value accumulator: the scalar reference near exact sums
// over the decoded rows; every target equal to it and to the decoded tile's sums bit for bit,
// columns past the row untouched.
void check_value_sums(int dim, int64_t n_rows, int64_t n_q, std::mt19937& rng) {
  const Rows rows = random_rows(dim, 8, 8, false, n_rows, 3, rng);
  const int64_t ld = n_rows + 2, acc_stride = dim + 8;
  const std::vector<float> w = normals(static_cast<std::size_t>(n_q * ld), rng);
  const std::vector<float> start = normals(static_cast<std::size_t>(n_q * acc_stride), rng);
  const CodewordValues values{rows.codes.data(), rows.stride, n_rows, rows.book.n_sub, rows.book.words.data()};
  std::vector<float> ref = start;
  scalar::accumulate_codeword_values(values, w.data(), ld, n_q, ref.data(), acc_stride);
  std::vector<float> decoded(static_cast<std::size_t>(n_rows * dim));
  pvq::decode_rows(rows.book, rows.codes.data(), rows.stride, n_rows, decoded.data());
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t e = 0; e < dim; ++e) {
      const std::size_t i = static_cast<std::size_t>(r * acc_stride + e);
      double exact = start[i], mag = std::fabs(start[i]);
      for (int64_t j = 0; j < n_rows; ++j) {
        const double term =
            double{w[static_cast<std::size_t>(r * ld + j)]} * decoded[static_cast<std::size_t>(j * dim + e)];
        exact += term;
        mag += std::fabs(term);
      }
      ASSERT_NEAR(ref[i], exact, 1e-5 * mag + 1e-6);
    }
  }
  on_every_target([&](const char* target) {
    std::vector<float> simd = start, tiled = start;
    accumulate_codeword_values(values, w.data(), ld, n_q, simd.data(), acc_stride);
    lm::kernels::tiles::accumulate_rows(w.data(), ld, n_q, decoded.data(), dim, n_rows, dim, tiled.data(), acc_stride);
    for (int64_t r = 0; r < n_q; ++r) {
      for (int64_t e = 0; e < acc_stride; ++e) {
        const std::size_t i = static_cast<std::size_t>(r * acc_stride + e);
        ASSERT_EQ(simd[i], ref[i]) << target << " dim " << dim << " q " << n_q << " r " << r << " e " << e;
        ASSERT_EQ(simd[i], tiled[i]) << target << " dim " << dim << " q " << n_q << " r " << r << " e " << e;
        if (e >= dim) {
          ASSERT_EQ(simd[i], start[i]);  // columns past the row untouched
        }
      }
    }
  });
}

TEST(CodewordRows, ValueSumsMatchScalarDecodedTilesAndExactSums) {
  if (!codeword_rows_supported()) GTEST_SKIP() << "no 8-lane target here";
  std::mt19937 rng(12);
  // dim 40: two position pairs and an odd position; 128: two passes of four pairs.
  for (const int dim : {64, 40, 128, 48}) {
    for (const int64_t n_rows : {int64_t{1}, int64_t{7}, int64_t{64}}) {
      // From 8 queries the AVX-512 loop, 6 per pass: 8..13 leave remainders 2, 3, 4, 5, 0, 1.
      for (const int64_t n_q : {1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 13, 48}) {
        check_value_sums(dim, n_rows, n_q, rng);
        if (HasFatalFailure()) return;
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels
