#include "veloxquant/caches/product_vq.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "veloxquant/core/kmeans.h"

namespace veloxquant::pvq {

ProductCodebook make_codebook(int dim, int sub, int bits, bool shared) {
  ProductCodebook book;
  book.sub = sub;
  book.n_sub = dim / sub;
  book.bits = bits;
  book.shared = shared;
  return book;
}

void train(ProductCodebook& book, const float* rows, int64_t n, int iterations, int64_t max_points, uint64_t seed) {
  const int64_t entries = book.entries(), sub = book.sub, dim = book.dim();
  const int64_t per_row = book.shared ? book.n_sub : 1;  // sub-vectors a row gives one book
  const int64_t available = n * per_row;
  const int64_t take = std::min(available, std::max<int64_t>(max_points, 1));
  std::vector<float> points(static_cast<std::size_t>(take * sub));
  book.words.assign(book.word_floats(), 0.0f);
  for (int b = 0; b < book.books(); ++b) {
    // An even stride over the available sub-vectors (row-major: row, then position).
    for (int64_t i = 0; i < take; ++i) {
      const int64_t p = i * available / take;
      const int64_t row = p / per_row, pos = book.shared ? p % per_row : b;
      std::memcpy(points.data() + i * sub, rows + row * dim + pos * sub, sizeof(float) * static_cast<std::size_t>(sub));
    }
    const core::KMeansResult fit = core::kmeans(points.data(), take, sub, entries, iterations, seed + 7919u * b);
    std::copy(fit.centroids.begin(), fit.centroids.end(), book.words.begin() + b * entries * sub);
  }
}

void put_code(uint8_t* packed, int64_t t, int bits, uint32_t code) {
  const int64_t bit = t * bits;
  uint8_t* p = packed + bit / 8;
  const int shift = static_cast<int>(bit % 8);
  const uint32_t w = code << shift;
  p[0] = static_cast<uint8_t>(p[0] | (w & 0xffu));
  if (shift + bits > 8) p[1] = static_cast<uint8_t>(p[1] | ((w >> 8) & 0xffu));
  if (shift + bits > 16) p[2] = static_cast<uint8_t>(p[2] | ((w >> 16) & 0xffu));
}

void encode_rows(const ProductCodebook& book, const float* rows, int64_t n, uint8_t* packed, int64_t packed_stride) {
  const int64_t entries = book.entries(), sub = book.sub, dim = book.dim();
  // ||x - c||^2 = ||x||^2 + ||c||^2 - 2 <x, c>: per book the codewords transposed
  // ([sub][entries]) with their norms, so the distances to all entries run over contiguous
  // floats. Scratch for this call only (not resident).
  thread_local std::vector<float> transposed, norms, dist;
  transposed.resize(static_cast<std::size_t>(book.books() * sub * entries));
  norms.resize(static_cast<std::size_t>(book.books() * entries));
  dist.resize(static_cast<std::size_t>(entries));
  for (int b = 0; b < book.books(); ++b) {
    const float* w = book.book(b);
    float* tb = transposed.data() + b * sub * entries;
    for (int64_t k = 0; k < entries; ++k) {
      float s = 0.0f;
      for (int64_t e = 0; e < sub; ++e) {
        tb[e * entries + k] = w[k * sub + e];
        s += w[k * sub + e] * w[k * sub + e];
      }
      norms[static_cast<std::size_t>(b * entries + k)] = s;
    }
  }
  for (int64_t r = 0; r < n; ++r) {
    uint8_t* out = packed + r * packed_stride;
    std::memset(out, 0, static_cast<std::size_t>(book.row_bytes()));
    for (int t = 0; t < book.n_sub; ++t) {
      const int b = book.shared ? 0 : t;
      const float* x = rows + r * dim + t * sub;
      const float* tb = transposed.data() + b * sub * entries;
      const float* nb = norms.data() + b * entries;
      float* d = dist.data();
      for (int64_t k = 0; k < entries; ++k) d[k] = nb[k];
      for (int64_t e = 0; e < sub; ++e) {
        const float xe = -2.0f * x[e];
        const float* c = tb + e * entries;
        for (int64_t k = 0; k < entries; ++k) d[k] += xe * c[k];
      }
      int64_t best = 0;
      float best_d = d[0];
      for (int64_t k = 1; k < entries; ++k) {
        if (d[k] < best_d) {
          best_d = d[k];
          best = k;
        }
      }
      put_code(out, t, book.bits, static_cast<uint32_t>(best));
    }
  }
}

void decode_row(const ProductCodebook& book, const uint8_t* packed, float* out) {
  for (int t = 0; t < book.n_sub; ++t) {
    const uint32_t code = book.bits == 8 ? packed[t] : code_at(packed, t, book.bits);
    std::memcpy(out + t * book.sub, book.word(t, code), sizeof(float) * static_cast<std::size_t>(book.sub));
  }
}

void build_lut(const ProductCodebook& book, const float* q, float* lut) {
  const int64_t entries = book.entries(), sub = book.sub;
  for (int t = 0; t < book.n_sub; ++t) {
    const float* qt = q + t * sub;
    const float* w = book.book(t);
    float* row = lut + t * entries;
    for (int64_t k = 0; k < entries; ++k) {
      float s = 0.0f;
      for (int64_t e = 0; e < sub; ++e) s += qt[e] * w[k * sub + e];
      row[k] = s;
    }
  }
}

}  // namespace veloxquant::pvq
