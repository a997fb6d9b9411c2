#include "veloxquant/caches/product_vq_rows.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "lm/kernels/attention_tiles.h"
#include "veloxquant/attention/codeword_rows.h"
#include "veloxquant/caches/product_vq_lut.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

ProductVqRows::ProductVqRows(const ProductVqParts& parts) : p_(parts) {
  dk_ = p_.key_book->dim();
  dv_ = p_.value_book ? p_.value_book->dim() : p_.values->dim(3);
  lut_size_ = pvq::lut_floats(*p_.key_book);
  if (p_.tail_keys && p_.rows > p_.frontier) {
    tail_keys_ = attention::PlainRows::of(*p_.tail_keys);
    tail_values_ = attention::PlainRows::of(*p_.tail_values);
  }
  if (!p_.value_book) values_ = attention::PlainRows::of(*p_.values);
  const bool fused = attention::kernels::codeword_rows_supported();
  const pvq::ProductCodebook& kb = *p_.key_book;
  codeword_keys_ = fused && kb.shared && kb.sub == 4 && kb.bits == 12 && kb.n_sub == 16;
  const pvq::ProductCodebook* vb = p_.value_book;
  codeword_values_ = fused && vb && !vb->shared && vb->sub == 8 && vb->bits == 8;
  // Codewords scored in registers (about 70 instructions per row for the 3 queries of a GQA group)
  // beat the 16-lookup table at any context the table's build (n_sub x 2^bits x sub MACs per
  // query, 1 MiB of tables for 4096 entries) could pay for, so the table is kept for the books
  // the codeword kernel does not cover.
  use_lut_ = p_.lut == LutChoice::always ||
             (p_.lut == LutChoice::automatic && !codeword_keys_ && p_.frontier >= p_.key_book->entries());
  gather_keys_ = use_lut_ && kb.n_sub == 4 && kb.bits == 8 && p_.key_codes->strides()[2] == 4;
}

void ProductVqRows::prepare_query(const float* query, float* prepared) const {
  std::memcpy(prepared, query, sizeof(float) * static_cast<std::size_t>(dk_));
  float* coded = prepared + dk_;
  if (p_.key_basis) {
    p_.key_basis->to_code_basis(query, coded);
  } else {
    std::memcpy(coded, query, sizeof(float) * static_cast<std::size_t>(dk_));
  }
  if (!use_lut_) return;
  float* lut = prepared + 2 * dk_;
  const pvq::ProductCodebook& book = *p_.key_book;
  if (p_.key_encoder == nullptr) {
    pvq::build_lut(book, coded, lut);
    return;
  }
  for (int t = 0; t < book.n_sub; ++t) {  // the same sums as build_lut, a vector of entries at a time
    pvq::lut_from_columns(p_.key_encoder->transposed(book.shared ? 0 : t), book.entries(), book.sub,
                          coded + int64_t{t} * book.sub, lut + int64_t{t} * book.entries());
  }
}

void ProductVqRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                               float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t pd = prepared_dim();
  const int64_t coded_end = std::min(j1, p_.frontier);
  const pvq::ProductCodebook& book = *p_.key_book;
  if (j0 < coded_end) {
    const int64_t n = coded_end - j0;
    if (gather_keys_) {
      pvq::score_lut_rows_4x8(row_ptr<uint8_t>(*p_.key_codes, b, h, j0), n, prepared + 2 * dk_, pd, n_queries, scores,
                              ld);
    } else if (use_lut_) {
      const int n_sub = book.n_sub, bits = book.bits;
      const int64_t entries = book.entries();
      thread_local std::vector<uint32_t> slots;
      slots.resize(static_cast<std::size_t>(n_sub));
      const uint8_t* first = row_ptr<uint8_t>(*p_.key_codes, b, h, j0);
      const int64_t stride = p_.key_codes->strides()[2];  // bytes between rows (U8)
      for (int64_t j = j0; j < coded_end; ++j) {
        const uint8_t* packed = first + (j - j0) * stride;
        // The row's codes unpacked once as table offsets, then looked up for every query.
        for (int t = 0; t < n_sub; ++t) {
          slots[static_cast<std::size_t>(t)] =
              static_cast<uint32_t>(t * entries) + (bits == 8 ? packed[t] : pvq::code_at(packed, t, bits));
        }
        for (int64_t r = 0; r < n_queries; ++r) {
          const float* lut = prepared + r * pd + 2 * dk_;
          float s = 0.0f;
          for (int t = 0; t < n_sub; ++t) s += lut[slots[static_cast<std::size_t>(t)]];
          scores[r * ld + (j - j0)] = s;
        }
      }
    } else if (codeword_keys_) {
      const attention::kernels::CodewordKeys keys{row_ptr<uint8_t>(*p_.key_codes, b, h, j0), p_.key_codes->strides()[2],
                                                  n, book.words.data()};
      attention::kernels::score_codeword_keys(keys, prepared + dk_, pd, n_queries, scores, ld);
    } else {
      // Few coded rows: decode them (codeword copies) and score them as plain rows.
      float* tile = scratch.f32(static_cast<std::size_t>(n * dk_));
      const uint8_t* first = row_ptr<uint8_t>(*p_.key_codes, b, h, j0);
      const int64_t stride = p_.key_codes->strides()[2];
      pvq::decode_rows(book, first, stride, n, tile);
      lm::kernels::tiles::score_rows(prepared + dk_, pd, n_queries, tile, dk_, n, dk_, scores, ld);
    }
  }
  if (j1 > p_.frontier) {  // the tail, scored with the raw query
    const int64_t t0 = std::max(j0, p_.frontier), n = j1 - t0;
    float* tile = scratch.f32(static_cast<std::size_t>(n * dk_));
    tail_keys_.widen(b, h, t0 - p_.frontier, j1 - p_.frontier, tile);
    lm::kernels::tiles::score_rows(prepared, pd, n_queries, tile, dk_, n, dk_, scores + (t0 - j0), ld);
  }
}

void ProductVqRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights,
                                    int64_t n_queries, int64_t ld, float* acc, attention::TileScratch& scratch) const {
  if (!p_.value_book) {  // comm_vq: values stay as stored, every row
    attention::accumulate_plain_tile(values_, b, h, j0, j1, {weights, n_queries, ld}, acc, scratch);
    return;
  }
  const int64_t coded_end = std::min(j1, p_.frontier);
  if (j0 < coded_end) {
    const int64_t n = coded_end - j0;
    const uint8_t* first = row_ptr<uint8_t>(*p_.value_codes, b, h, j0);
    const int64_t stride = p_.value_codes->strides()[2];
    if (codeword_values_) {
      const attention::kernels::CodewordValues values{first, stride, n, p_.value_book->n_sub,
                                                      p_.value_book->words.data()};
      attention::kernels::accumulate_codeword_values(values, weights, ld, n_queries, acc, dv_);
    } else {
      float* tile = scratch.f32(static_cast<std::size_t>(n * dv_));
      pvq::decode_rows(*p_.value_book, first, stride, n, tile);
      lm::kernels::tiles::accumulate_rows(weights, ld, n_queries, tile, dv_, n, dv_, acc, dv_);
    }
  }
  if (j1 > p_.frontier) {
    const int64_t t0 = std::max(j0, p_.frontier);
    attention::accumulate_plain_tile(tail_values_, b, h, t0 - p_.frontier, j1 - p_.frontier,
                                     {weights + (t0 - j0), n_queries, ld}, acc, scratch);
  }
}

}  // namespace veloxquant
