#pragma once
// Product vector quantization shared by vecinfer and comm_vq (caches/vecinfer_cache.h,
// caches/comm_vq_cache.h): a row of `dim` floats is cut into n_sub sub-vectors of `sub`
// coordinates, each replaced by the index of its nearest codeword (squared distance, lowest index
// on ties) in a codebook of 2^bits entries, either one codebook for every sub-vector position
// (`shared`, VecInfer's keys after the Hadamard rotation made the coordinates alike) or one per
// position. Codes are bit-packed LSB-first, n_sub * bits bits per row rounded up to whole bytes
// (12-bit codes: 16 sub-vectors in 24 bytes, not 32).
//
// Codebooks are trained by seeded Lloyd k-means (product_vq.cpp: a vectorized assignment step;
// core/kmeans.h's double loop is too slow inside a prefill) on the sub-vectors of the
// first rows a cache quantizes (its prefill), at most max_points of them (an even stride over the
// rows, so training cost is bounded whatever the prefill length).
//
// Scoring: <q, row> = sum_t <q_t, c_{code_t}>; with a per-query lookup table
// LUT[t][k] = <q_t, c_k> (n_sub * 2^bits floats, built once per query per step) a row costs n_sub
// lookups. Building the table costs n_sub * 2^bits * sub MACs, decoding the rows instead costs
// rows * dim; product_vq_rows.h picks the cheaper per call.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "base/aligned_buffer.h"

namespace veloxquant::pvq {

// f32 numbers a cache keeps resident beside its codes (codewords, smoothing factors), in an aligned
// buffer like every other resident byte of a cache, so nbytes() and the allocation counter agree.
class FloatArray {
 public:
  FloatArray() = default;
  explicit FloatArray(std::span<const float> values) : buf_(values.size() * sizeof(float)) {
    if (!values.empty()) std::memcpy(buf_.data(), values.data(), values.size() * sizeof(float));
  }
  void assign_zeros(std::size_t n) { buf_ = base::AlignedBuffer(n * sizeof(float)); }
  std::size_t size() const { return buf_.size() / sizeof(float); }
  bool empty() const { return buf_.empty(); }
  float* data() { return buf_.as<float>(); }
  const float* data() const { return buf_.as<float>(); }
  float& operator[](std::size_t i) { return data()[i]; }
  const float& operator[](std::size_t i) const { return data()[i]; }
  std::span<const float> span() const { return {data(), size()}; }
  std::size_t nbytes() const { return buf_.size(); }

 private:
  base::AlignedBuffer buf_;
};

struct ProductCodebook {
  int sub = 0;         // coordinates per sub-vector
  int n_sub = 0;       // sub-vectors per row
  int bits = 0;        // bits per code
  bool shared = true;  // one book for every position, else one per position
  // Searches (k-means assignments, encoding) with fused distance terms (quant/nearest_codeword.h:
  // nearest_codeword_fused): vecinfer's books. Off: a multiply then an add per term (comm_vq).
  bool fused_distances = false;
  FloatArray words;  // [books][entries][sub]

  int64_t entries() const { return int64_t{1} << bits; }
  int64_t dim() const { return int64_t{sub} * n_sub; }
  int books() const { return shared ? 1 : n_sub; }
  bool trained() const { return !words.empty(); }
  const float* book(int t) const { return words.data() + (shared ? 0 : t) * entries() * sub; }
  const float* word(int t, int64_t k) const { return book(t) + k * sub; }
  // Bytes of one packed row of codes.
  int64_t row_bytes() const { return (int64_t{n_sub} * bits + 7) / 8; }
  // Resident bytes of the codewords (f32).
  std::size_t nbytes() const { return words.nbytes(); }
  std::size_t word_floats() const { return static_cast<std::size_t>(books()) * entries() * sub; }
};

// An untrained book of the given geometry (words empty).
ProductCodebook make_codebook(int dim, int sub, int bits, bool shared);

// Trains `book`'s words on n rows of book.dim() floats (row-major): seeded k-means with
// `iterations` Lloyd iterations on at most max_points sub-vectors per book.
void train(ProductCodebook& book, const float* rows, int64_t n, int iterations, int64_t max_points, uint64_t seed);

// Nearest-codeword search tables of one book, built once per store() and used for every head.
class Encoder {
 public:
  explicit Encoder(const ProductCodebook& book);
  ~Encoder();
  // Codes of n rows (nearest codeword per sub-vector, lowest index on ties), packed, row r at
  // packed + r * packed_stride.
  void encode(const float* rows, int64_t n, uint8_t* packed, int64_t packed_stride) const;
  // Book b's codewords transposed, [sub][entries] (the search table; product_vq_lut.h builds
  // lookup tables from it).
  const float* transposed(int b) const;

 private:
  struct Tables;
  const ProductCodebook& book_;
  std::unique_ptr<Tables> tables_;
};

// Codes of n rows (nearest codeword per sub-vector), packed, row r at packed + r * packed_stride.
void encode_rows(const ProductCodebook& book, const float* rows, int64_t n, uint8_t* packed, int64_t packed_stride);

// Code t of a packed row (bits <= 16).
inline uint32_t code_at(const uint8_t* packed, int64_t t, int bits) {
  const int64_t bit = t * bits;
  const uint8_t* p = packed + bit / 8;
  const int shift = static_cast<int>(bit % 8);
  // A code spans at most three bytes (7 + 16 bits); read only the bytes it covers.
  uint32_t w = p[0];
  if (shift + bits > 8) w |= uint32_t{p[1]} << 8;
  if (shift + bits > 16) w |= uint32_t{p[2]} << 16;
  return (w >> shift) & ((uint32_t{1} << bits) - 1);
}

// Writes code t of a packed row (the row's bytes zeroed first by the caller).
void put_code(uint8_t* packed, int64_t t, int bits, uint32_t code);

// One packed row back to dim floats.
void decode_row(const ProductCodebook& book, const uint8_t* packed, float* out);
// A tile of packed rows (row j at first + j * stride, j < n) back to f32, row j at out + j * dim():
// decode_row's result for every row, with the row loop inside (attention decodes 64-row tiles).
void decode_rows(const ProductCodebook& book, const uint8_t* first, int64_t stride, int64_t n, float* out);

// LUT[t * entries + k] = <q_t, codeword k of position t> for a query q of dim floats.
void build_lut(const ProductCodebook& book, const float* q, float* lut);
inline int64_t lut_floats(const ProductCodebook& book) { return int64_t{book.n_sub} * book.entries(); }

// <q, row> of a packed row through its LUT.
inline float lut_score(const float* lut, const uint8_t* packed, int n_sub, int bits) {
  const int64_t entries = int64_t{1} << bits;
  float s = 0.0f;
  if (bits == 8) {
    for (int t = 0; t < n_sub; ++t) s += lut[t * entries + packed[t]];
  } else {
    for (int t = 0; t < n_sub; ++t) s += lut[t * entries + code_at(packed, t, bits)];
  }
  return s;
}

}  // namespace veloxquant::pvq
