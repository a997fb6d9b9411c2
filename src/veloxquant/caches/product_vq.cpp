#include "veloxquant/caches/product_vq.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>

#include "base/thread_pool.h"
#include "veloxquant/quant/nearest_codeword.h"
#include "veloxquant/quant/projected_search.h"
#include "veloxquant/core/rng.h"

namespace veloxquant::pvq {

ProductCodebook make_codebook(int dim, int sub, int bits, bool shared) {
  ProductCodebook book;
  book.sub = sub;
  book.n_sub = dim / sub;
  book.bits = bits;
  book.shared = shared;
  return book;
}

namespace {

// The codewords of one book transposed ([sub][entries]) with their squared norms, so that
// ||x - c||^2 - ||x||^2 = ||c||^2 - 2 <x, c> runs over contiguous floats for all entries at once
// (nearest_codeword.h: SIMD, the running minimum kept in registers; a scalar double loop per
// centroid, as core::kmeans has, costs ~20x more at 4096 entries). Read-only once loaded, so
// threads share it.
// Books of at least this many 4-float entries search through ProjectedBook (below it the full
// search's whole-book passes are as cheap as the sorted walk).
constexpr int64_t kProjectedMinEntries = 256;

struct SearchTable {
  std::vector<float> transposed, norms;
  int64_t entries = 0, sub = 0;
  bool fused = false;
  // The fused search over a book sorted along its principal axis (quant/projected_search.h: the
  // same index, reading only the entries near the point along that axis): vecinfer's 4096-entry
  // key book, whose full search was most of the method's prefill beside attention.
  ProjectedBook projected;
  void load(const float* words, int64_t k, int64_t dim, bool fused_distances) {
    entries = k;
    sub = dim;
    fused = fused_distances;
    transposed.resize(static_cast<std::size_t>(k * dim));
    norms.resize(static_cast<std::size_t>(k));
    for (int64_t c = 0; c < k; ++c) {
      float s = 0.0f;
      for (int64_t e = 0; e < dim; ++e) {
        transposed[static_cast<std::size_t>(e * k + c)] = words[c * dim + e];
        s += words[c * dim + e] * words[c * dim + e];
      }
      norms[static_cast<std::size_t>(c)] = s;
    }
    projected = ProjectedBook();
    if (fused && dim == 4 && k >= kProjectedMinEntries)
      projected.load(transposed.data(), norms.data(), k, static_cast<int>(dim));
  }
  // Index of the nearest codeword (lowest on ties).
  int64_t nearest(const float* x) const {
    if (projected.loaded()) return projected.nearest(x);
    return fused ? nearest_codeword_fused(transposed.data(), norms.data(), entries, static_cast<int>(sub), x)
                 : nearest_codeword(transposed.data(), norms.data(), entries, static_cast<int>(sub), x);
  }
  // out[i] = nearest(xs + i * stride) for i < count; the fused search takes several points per
  // pass over the table.
  void nearest_batch(const float* xs, int64_t count, int64_t stride, int64_t* out) const {
    if (projected.loaded()) {
      projected.nearest_batch(xs, count, stride, out);
      return;
    }
    if (fused) {
      nearest_codewords_fused(transposed.data(), norms.data(), entries, static_cast<int>(sub), xs, count, stride, out);
      return;
    }
    for (int64_t i = 0; i < count; ++i) out[i] = nearest(xs + i * stride);
  }
};

// Rows per chunk of the threaded searches (each is thousands of distance evaluations, so
// chunks of this size keep the pool's hand-off negligible).
constexpr int64_t kSearchChunk = 16;

// Seeded Lloyd k-means on n points of `dim` floats into k centroids: the initial centroids are k
// distinct points drawn by core::Rng (copies when n < k), then up to `iterations` rounds of
// nearest-centroid assignment and mean update (double sums); an emptied cell keeps its centroid.
// Deterministic for a given seed. Written here rather than calling core::kmeans because the
// codebooks are trained inside the first forward pass of every layer (4096 entries for VecInfer's
// keys): core::kmeans's k-means++ seeding alone is one more full n x k pass in double.
std::vector<float> lloyd(const float* points, int64_t n, int64_t dim, int64_t k, int iterations, uint64_t seed,
                         bool fused) {
  std::vector<float> centroids(static_cast<std::size_t>(k * dim));
  std::vector<int64_t> order(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  core::Rng rng(seed);
  const int64_t distinct = std::min(n, k);
  for (int64_t i = 0; i < distinct; ++i) {  // partial Fisher-Yates: the first `distinct` of a shuffle
    const int64_t j = i + static_cast<int64_t>(rng.below(static_cast<uint64_t>(n - i)));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  for (int64_t c = 0; c < k; ++c) {
    const int64_t p = order[static_cast<std::size_t>(c % distinct)];
    std::memcpy(centroids.data() + c * dim, points + p * dim, sizeof(float) * static_cast<std::size_t>(dim));
  }
  SearchTable table;
  std::vector<int64_t> assignment(static_cast<std::size_t>(n), -1);
  std::vector<double> sums(static_cast<std::size_t>(k * dim));
  std::vector<int64_t> mass(static_cast<std::size_t>(k));
  for (int it = 0; it < iterations; ++it) {
    table.load(centroids.data(), k, dim, fused);
    // Assignments are independent per point: split across the pool, the result does not depend
    // on the split.
    std::atomic<bool> changed{false};
    base::ThreadPool::global().parallel_for(
        n,
        [&](int64_t begin, int64_t end) {
          bool moved = false;
          int64_t found[kSearchChunk];
          for (int64_t i0 = begin; i0 < end; i0 += kSearchChunk) {
            const int64_t n_points = std::min(kSearchChunk, end - i0);
            table.nearest_batch(points + i0 * dim, n_points, dim, found);
            for (int64_t i = i0; i < i0 + n_points; ++i) {
              const int64_t c = found[i - i0];
              if (c != assignment[static_cast<std::size_t>(i)]) moved = true;
              assignment[static_cast<std::size_t>(i)] = c;
            }
          }
          if (moved) changed.store(true, std::memory_order_relaxed);
        },
        kSearchChunk);
    if (!changed.load()) break;
    std::fill(sums.begin(), sums.end(), 0.0);
    std::fill(mass.begin(), mass.end(), 0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c = assignment[static_cast<std::size_t>(i)];
      ++mass[static_cast<std::size_t>(c)];
      for (int64_t e = 0; e < dim; ++e) sums[static_cast<std::size_t>(c * dim + e)] += points[i * dim + e];
    }
    for (int64_t c = 0; c < k; ++c) {
      if (mass[static_cast<std::size_t>(c)] == 0) continue;
      for (int64_t e = 0; e < dim; ++e) {
        centroids[static_cast<std::size_t>(c * dim + e)] =
            static_cast<float>(sums[static_cast<std::size_t>(c * dim + e)] / double(mass[static_cast<std::size_t>(c)]));
      }
    }
  }
  return centroids;
}

}  // namespace

void train(ProductCodebook& book, const float* rows, int64_t n, int iterations, int64_t max_points, uint64_t seed) {
  const int64_t entries = book.entries(), sub = book.sub, dim = book.dim();
  const int64_t per_row = book.shared ? book.n_sub : 1;  // sub-vectors a row gives one book
  const int64_t available = n * per_row;
  const int64_t take = std::min(available, std::max<int64_t>(max_points, 1));
  std::vector<float> points(static_cast<std::size_t>(take * sub));
  book.words.assign_zeros(book.word_floats());
  for (int b = 0; b < book.books(); ++b) {
    // An even stride over the available sub-vectors (row-major: row, then position).
    for (int64_t i = 0; i < take; ++i) {
      const int64_t p = i * available / take;
      const int64_t row = p / per_row, pos = book.shared ? p % per_row : b;
      std::memcpy(points.data() + i * sub, rows + row * dim + pos * sub, sizeof(float) * static_cast<std::size_t>(sub));
    }
    const std::vector<float> words = lloyd(points.data(), take, sub, entries, iterations,
                                           seed + uint64_t{7919} * static_cast<uint64_t>(b), book.fused_distances);
    std::copy(words.begin(), words.end(), book.words.data() + b * entries * sub);
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

struct Encoder::Tables {
  std::vector<SearchTable> books;
};

Encoder::Encoder(const ProductCodebook& book) : book_(book), tables_(std::make_unique<Tables>()) {
  tables_->books.resize(static_cast<std::size_t>(book.books()));
  for (int b = 0; b < book.books(); ++b)
    tables_->books[static_cast<std::size_t>(b)].load(book.book(b), book.entries(), book.sub, book.fused_distances);
}

Encoder::~Encoder() = default;

const float* Encoder::transposed(int b) const { return tables_->books[static_cast<std::size_t>(b)].transposed.data(); }

void Encoder::encode(const float* rows, int64_t n, uint8_t* packed, int64_t packed_stride) const {
  const ProductCodebook& book = book_;
  const int64_t dim = book.dim();
  // Rows are coded independently (each into its own bytes): split across the pool.
  base::ThreadPool::global().parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        int64_t codes[kSearchChunk];
        for (int64_t r = begin; r < end; ++r) {
          uint8_t* out = packed + r * packed_stride;
          std::memset(out, 0, static_cast<std::size_t>(book.row_bytes()));
          if (book.shared) {  // one book: the row's sub-vectors searched together, kSearchChunk at a time
            for (int64_t t0 = 0; t0 < book.n_sub; t0 += kSearchChunk) {
              const int64_t n_codes = std::min<int64_t>(kSearchChunk, book.n_sub - t0);
              tables_->books[0].nearest_batch(rows + r * dim + t0 * book.sub, n_codes, book.sub, codes);
              for (int64_t t = t0; t < t0 + n_codes; ++t)
                put_code(out, t, book.bits, static_cast<uint32_t>(codes[t - t0]));
            }
            continue;
          }
          for (int64_t t = 0; t < book.n_sub; ++t) {
            const int64_t code = tables_->books[static_cast<std::size_t>(t)].nearest(rows + r * dim + t * book.sub);
            put_code(out, t, book.bits, static_cast<uint32_t>(code));
          }
        }
      },
      kSearchChunk);
}

void encode_rows(const ProductCodebook& book, const float* rows, int64_t n, uint8_t* packed, int64_t packed_stride) {
  Encoder(book).encode(rows, n, packed, packed_stride);
}

namespace {
// Codeword copies with the width known at compile time (inlined moves, no memcpy call per
// sub-vector: the decode of a 64-row tile is the hot loop while there are fewer rows than table
// entries).
template <int Sub>
void decode_fixed(const ProductCodebook& book, const uint8_t* packed, float* out) {
  const int64_t entries = book.entries();
  const float* words = book.words.data();
  const int64_t book_stride = book.shared ? 0 : entries * Sub;
  if (book.bits == 8) {
    for (int t = 0; t < book.n_sub; ++t) {
      const float* w = words + t * book_stride + int64_t{packed[t]} * Sub;
      for (int e = 0; e < Sub; ++e) out[t * Sub + e] = w[e];
    }
  } else if (book.bits == 12) {  // two codes in three bytes
    for (int64_t t = 0; t + 1 < book.n_sub; t += 2) {
      const uint8_t* p = packed + (t / 2) * 3;
      const uint32_t w3 = uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16);
      const float* a = words + t * book_stride + int64_t{w3 & 0xfffu} * Sub;
      const float* b = words + (t + 1) * book_stride + int64_t{w3 >> 12} * Sub;
      for (int e = 0; e < Sub; ++e) out[t * Sub + e] = a[e];
      for (int e = 0; e < Sub; ++e) out[(t + 1) * Sub + e] = b[e];
    }
    if (book.n_sub % 2) {
      const int t = book.n_sub - 1;
      const float* a = words + t * book_stride + int64_t{code_at(packed, t, 12)} * Sub;
      for (int e = 0; e < Sub; ++e) out[t * Sub + e] = a[e];
    }
  } else {
    for (int t = 0; t < book.n_sub; ++t) {
      const float* w = words + t * book_stride + int64_t{code_at(packed, t, book.bits)} * Sub;
      for (int e = 0; e < Sub; ++e) out[t * Sub + e] = w[e];
    }
  }
}

// The tile form: per row, the codes read straight from their bytes (8-bit: one byte each;
// 12-bit: four codes per 64-bit load where the load stays inside the row, then two per three
// bytes) and each codeword copied with one fixed-size move. Width, code bits, geometry and
// whether one book serves every position are compile-time or locals (restrict pointers), so
// nothing is reloaded per codeword.
template <int Sub, int Bits, bool Shared>
void decode_tile(const float* __restrict words, int64_t book_stride, int n_sub, int bits,
                 const uint8_t* __restrict first, int64_t stride, int64_t n, float* __restrict out) {
  constexpr std::size_t kBytes = sizeof(float) * Sub;
  const int64_t dim = int64_t{n_sub} * Sub, row_bytes = (int64_t{n_sub} * bits + 7) / 8;
  const auto word = [&](int64_t t, uint64_t code) {
    return words + (Shared ? 0 : t * book_stride) + static_cast<int64_t>(code) * Sub;
  };
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* packed = first + j * stride;
    float* o = out + j * dim;
    int64_t t = 0;
    if constexpr (Bits == 8) {
      for (; t < n_sub; ++t) std::memcpy(o + t * Sub, word(t, packed[t]), kBytes);
    } else if constexpr (Bits == 12) {
      for (; t + 4 <= n_sub && (t / 2) * 3 + 8 <= row_bytes; t += 4) {
        uint64_t w;
        std::memcpy(&w, packed + (t / 2) * 3, sizeof(w));
        std::memcpy(o + t * Sub, word(t, w & 0xfffu), kBytes);
        std::memcpy(o + (t + 1) * Sub, word(t + 1, (w >> 12) & 0xfffu), kBytes);
        std::memcpy(o + (t + 2) * Sub, word(t + 2, (w >> 24) & 0xfffu), kBytes);
        std::memcpy(o + (t + 3) * Sub, word(t + 3, (w >> 36) & 0xfffu), kBytes);
      }
      for (; t + 1 < n_sub; t += 2) {
        const uint8_t* p = packed + (t / 2) * 3;
        const uint32_t w3 = uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16);
        std::memcpy(o + t * Sub, word(t, w3 & 0xfffu), kBytes);
        std::memcpy(o + (t + 1) * Sub, word(t + 1, w3 >> 12), kBytes);
      }
    }
    for (; t < n_sub; ++t) std::memcpy(o + t * Sub, word(t, code_at(packed, t, bits)), kBytes);
  }
}

template <int Sub, bool Shared>
void decode_tile_bits(const ProductCodebook& book, const uint8_t* first, int64_t stride, int64_t n, float* out) {
  const int64_t book_stride = book.entries() * Sub;
  const float* words = book.words.data();
  switch (book.bits) {
    case 8:
      return decode_tile<Sub, 8, Shared>(words, book_stride, book.n_sub, 8, first, stride, n, out);
    case 12:
      return decode_tile<Sub, 12, Shared>(words, book_stride, book.n_sub, 12, first, stride, n, out);
    default:
      return decode_tile<Sub, 0, Shared>(words, book_stride, book.n_sub, book.bits, first, stride, n, out);
  }
}

template <int Sub>
void decode_tile_fixed(const ProductCodebook& book, const uint8_t* first, int64_t stride, int64_t n, float* out) {
  if (book.shared) return decode_tile_bits<Sub, true>(book, first, stride, n, out);
  decode_tile_bits<Sub, false>(book, first, stride, n, out);
}

template <int Sub>
void lut_fixed(const ProductCodebook& book, const float* q, float* lut) {
  const int64_t entries = book.entries();
  for (int t = 0; t < book.n_sub; ++t) {
    float qt[Sub];
    for (int e = 0; e < Sub; ++e) qt[e] = q[t * Sub + e];
    const float* w = book.book(t);
    float* row = lut + t * entries;
    for (int64_t k = 0; k < entries; ++k) {
      float s = 0.0f;
      for (int e = 0; e < Sub; ++e) s += qt[e] * w[k * Sub + e];
      row[k] = s;
    }
  }
}
}  // namespace

void decode_row(const ProductCodebook& book, const uint8_t* packed, float* out) {
  switch (book.sub) {
    case 2:
      return decode_fixed<2>(book, packed, out);
    case 4:
      return decode_fixed<4>(book, packed, out);
    case 8:
      return decode_fixed<8>(book, packed, out);
    case 16:
      return decode_fixed<16>(book, packed, out);
    default:
      break;
  }
  for (int64_t t = 0; t < book.n_sub; ++t) {
    const uint32_t code = book.bits == 8 ? packed[t] : code_at(packed, t, book.bits);
    std::memcpy(out + t * book.sub, book.word(t, code), sizeof(float) * static_cast<std::size_t>(book.sub));
  }
}

void decode_rows(const ProductCodebook& book, const uint8_t* first, int64_t stride, int64_t n, float* out) {
  switch (book.sub) {
    case 2:
      return decode_tile_fixed<2>(book, first, stride, n, out);
    case 4:
      return decode_tile_fixed<4>(book, first, stride, n, out);
    case 8:
      return decode_tile_fixed<8>(book, first, stride, n, out);
    case 16:
      return decode_tile_fixed<16>(book, first, stride, n, out);
    default:
      break;
  }
  for (int64_t j = 0; j < n; ++j) decode_row(book, first + j * stride, out + j * book.dim());
}

void build_lut(const ProductCodebook& book, const float* q, float* lut) {
  switch (book.sub) {
    case 4:
      return lut_fixed<4>(book, q, lut);
    case 8:
      return lut_fixed<8>(book, q, lut);
    case 16:
      return lut_fixed<16>(book, q, lut);
    default:
      break;
  }
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
