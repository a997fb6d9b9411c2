#pragma once
// The storage of a product-VQ cache (vecinfer, comm_vq) as one RowSource for the shared attention
// driver: rows [0, frontier) as packed key codes (and packed value codes, or plain values),
// rows [frontier, rows) as plain input-dtype rows in a tail buffer (VecInfer's fp16 residual
// window; comm_vq has none).
//
// Keys are scored in the codes' basis: prepare_query maps the query there once (KeyBasis:
// VecInfer's smoothing + Hadamard; identity for comm_vq) and, when the call has enough coded rows
// to pay for it, builds the lookup table LUT[t][k] = <q'_t, c_k> (pvq::build_lut), after which a
// row costs n_sub lookups. Building the table costs n_sub * 2^bits * sub MACs, decoding the rows
// and scoring them costs about frontier * dim, so the table is built when frontier >= 2^bits
// (for VecInfer's 12-bit keys: from 4096 coded rows on; for comm_vq's 8-bit codes from 256).
// The choice is per call and changes no result beyond float rounding.
//
// Values: coded rows are decoded a tile at a time (n_sub codeword copies per row) and
// accumulated for all queries of the block at once (lm/kernels/attention_tiles.h).
//
// VecInfer's default books (keys: one shared book, 12-bit codes of 4 floats, head_dim 64;
// values: a book per position, 8-bit codes of 8 floats) skip the decode: the codewords are
// loaded straight into the registers the FMAs read (attention/codeword_rows.h), the same
// arithmetic as decode + tile kernel, and keys never use the table (it does not pay at any
// context: see the constructor).
//
// Prepared query layout: [raw q (dk) | q in the code basis (dk) | LUT, when built].
#include <cstdint>

#include "lm/tensor.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/row_source.h"
#include "veloxquant/caches/product_vq.h"

namespace veloxquant {

// The basis keys are coded in, as a map of queries: <q, k> = <to_code_basis(q), k'>.
class KeyBasis {
 public:
  virtual ~KeyBasis() = default;
  virtual void to_code_basis(const float* query, float* out) const = 0;
};

enum class LutChoice { automatic, always, never };

struct ProductVqParts {
  const pvq::ProductCodebook* key_book = nullptr;
  // The key book's encoder when the cache keeps one: its transposed tables make the per-query
  // lookup tables in SIMD (product_vq_lut.h); null builds them entry by entry.
  const pvq::Encoder* key_encoder = nullptr;
  const KeyBasis* key_basis = nullptr;               // null: codes in the model's basis
  const lm::Tensor* key_codes = nullptr;             // U8 [B, H, cap, key row bytes]
  const pvq::ProductCodebook* value_book = nullptr;  // null: values plain for every row
  const lm::Tensor* value_codes = nullptr;           // U8 [B, H, cap, value row bytes]
  const lm::Tensor* values = nullptr;                // [B, H, cap, Dv] when value_book is null
  const lm::Tensor* tail_keys = nullptr;             // rows [frontier, rows) at tail row j - frontier
  const lm::Tensor* tail_values = nullptr;
  int64_t frontier = 0, rows = 0;
  LutChoice lut = LutChoice::automatic;
};

class ProductVqRows final : public attention::RowSource {
 public:
  explicit ProductVqRows(const ProductVqParts& parts);

  int64_t key_dim() const override { return dk_; }
  int64_t value_dim() const override { return dv_; }
  int64_t rows(int64_t, int64_t) const override { return p_.rows; }
  int64_t prepared_dim() const override { return 2 * dk_ + (use_lut_ ? lut_size_ : 0); }
  void prepare_query(const float* query, float* prepared) const override;
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, attention::TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, attention::TileScratch& scratch) const override;
  bool uses_lut() const { return use_lut_; }

 private:
  ProductVqParts p_;
  attention::PlainRows tail_keys_{}, tail_values_{}, values_{};
  int64_t dk_ = 0, dv_ = 0, lut_size_ = 0;
  bool use_lut_ = false;
  // vecinfer's default books, scored / accumulated from their codewords (attention/codeword_rows.h).
  bool codeword_keys_ = false, codeword_values_ = false;
  // comm_vq's default rows (4 codes of 8 bits, 4 bytes apart): tables read by SIMD gathers.
  bool gather_keys_ = false;
};

}  // namespace veloxquant
