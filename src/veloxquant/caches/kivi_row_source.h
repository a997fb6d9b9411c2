#pragma once
// KIVI's quantized rows as a RowSource for the attention driver (attention/attention_driver.h):
// scored and accumulated straight from the packed codes, never dequantized into a copy.
//
// Keys are per-channel groups of G tokens with (scale s_gc, min m_gc) per channel c, so for a
// query q and token t of group g:  <q, k_t> = sum_c (q_c s_gc) code_tc + sum_c q_c m_gc.
// The query is folded into each group's scales once per group (G rows), then every row costs
// one unpack and D multiply-adds shared by all queries of the block.
// Values are per-token groups over channels, so with weights w_j:
//   sum_j w_j v_jc = sum_j (w_j s_j,g(c)) code_jc + sum_j w_j m_j,g(c)
// — the weights are scaled per channel group, the codes accumulated as they are.
// Codes are read in code order (attention/code_rows.h); queries are permuted into it and the
// accumulated values put back in natural order once per tile.
// With fitted levels (kvquant, caches/fitted_levels.h) a code c stands for level l_c instead of c:
// the unpacked tile goes through the 2^b-entry table first and the same algebra follows.
// A store that keeps only some positions (zipcache's precision tiers, caches/zipcache_cache.h)
// passes their positions and its own key token-group size (rows per key params row), which then
// differs from the value channel-group size.
#include <cstdint>
#include <vector>

#include "lm/tensor.h"
#include "veloxquant/attention/code_rows.h"
#include "veloxquant/attention/row_source.h"
#include "veloxquant/attention/word_plane_scores.h"

namespace veloxquant {

// Keys of a width that does not read by planes (3, 5, 6, 7 bits) scored by word planes
// (attention/word_plane_scores.h) instead of a gathered f32 tile: the layout, and for each of its
// code-order positions the natural channel whose (scale, min) it takes (key_dim for padding, which
// reads a zero pair). Built once per cache shape, outside the per-step path.
struct WordPlaneKeys {
  WordPlaneKeys(int bits, int64_t key_dim);
  attention::kernels::WordPlanes planes;
  std::vector<int32_t> pair_index;
};

class KiviQuantizedRows final : public attention::RowSource {
 public:
  // The cache's storage (caches/kivi_cache.h): key_codes [B,H,cap,wk] u32, key_params
  // [B,H,cap/G,2*D] f16, value_codes [B,H,cap,wv] u32, value_params [B,H,cap,2*gv] f16; the first
  // `rows` rows of each head are quantized. levels: nullptr (codes are the levels) or f32
  // [B, H, 2, 2^bits] (row 0 the keys' levels, row 1 the values').
  KiviQuantizedRows(const lm::Tensor& key_codes, const lm::Tensor& key_params, const lm::Tensor& value_codes,
                    const lm::Tensor& value_params, int64_t rows, int bits, int group,
                    const attention::CodeOrder& key_order, const attention::CodeOrder& value_order,
                    const lm::Tensor* levels = nullptr);
  // Rows per key params row when it is not `group` (0 = `group`), and the rows' true positions
  // (i32 [B, H, cap, 1], ascending per head; nullptr = rows are positions 0, 1, ...).
  KiviQuantizedRows& with_key_rows_per_group(int64_t rows_per_group) {
    key_group_ = rows_per_group > 0 ? rows_per_group : group_;
    return *this;
  }
  KiviQuantizedRows& with_positions(const lm::Tensor* positions) {
    positions_ = positions;
    return *this;
  }
  // Keys read by word planes (non-planar widths): the prepared query is then in their padded
  // code order (prepared_dim() = planes.dim(), zeros at padding). nullptr: the f32 tile path.
  KiviQuantizedRows& with_word_plane_keys(const WordPlaneKeys* keys) {
    word_keys_ = keys != nullptr && !key_order_.planar() ? keys : nullptr;
    return *this;
  }
  // Planar keys scored with the query in f32 (attention/float_key_scores.h) instead of rounded to
  // 16-bit integers (attention/integer_key_scores.h): for caches whose keys the rounding costs
  // quality (cachegen).
  KiviQuantizedRows& with_float_keys(bool on) {
    float_keys_ = on;
    return *this;
  }
  // Position of natural key channel i in the prepared query.
  int64_t prepared_position(int64_t i) const;
  const int32_t* positions(int64_t b, int64_t h) const override;

  int64_t key_dim() const override { return key_order_.size(); }
  int64_t value_dim() const override { return value_order_.size(); }
  int64_t rows(int64_t, int64_t) const override { return rows_; }
  int64_t prepared_dim() const override { return word_keys_ != nullptr ? word_keys_->planes.dim() : key_dim(); }
  void prepare_query(const float* query, float* prepared) const override;
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, attention::TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, attention::TileScratch& scratch) const override;

 private:
  void score_word_planes(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                         float* scores, int64_t ld, attention::TileScratch& scratch) const;

  const lm::Tensor& key_codes_;
  const lm::Tensor& key_params_;
  const lm::Tensor& value_codes_;
  const lm::Tensor& value_params_;
  int64_t rows_;
  int bits_;
  int group_;
  int64_t key_group_;
  const lm::Tensor* positions_ = nullptr;
  const attention::CodeOrder& key_order_;
  const attention::CodeOrder& value_order_;
  const lm::Tensor* levels_;
  const WordPlaneKeys* word_keys_ = nullptr;
  bool float_keys_ = false;
};

// A segment attended beside KiviQuantizedRows with word-plane keys (the full-precision tail): the
// driver gives every segment of a call prepared queries of one length, so this one's own
// (shorter) prepared query sits first and zeros follow; score_tile hands the inner source its
// queries back to back, copied into the scratch's second float buffer (which the inner source
// must not use in score_tile: DtypeRowSource does not).
class PaddedQueryRows final : public attention::RowSource {
 public:
  PaddedQueryRows(const attention::RowSource& inner, int64_t prepared_dim)
      : inner_(inner), prepared_dim_(prepared_dim) {}

  int64_t key_dim() const override { return inner_.key_dim(); }
  int64_t value_dim() const override { return inner_.value_dim(); }
  int64_t rows(int64_t b, int64_t h) const override { return inner_.rows(b, h); }
  const int32_t* positions(int64_t b, int64_t h) const override { return inner_.positions(b, h); }
  int64_t position_base() const override { return inner_.position_base(); }
  int64_t prepared_dim() const override { return prepared_dim_; }
  void prepare_query(const float* query, float* prepared) const override;
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, attention::TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, attention::TileScratch& scratch) const override {
    inner_.accumulate_tile(b, h, j0, j1, weights, n_queries, ld, acc, scratch);
  }
  void finish_row(float* row) const override { inner_.finish_row(row); }

 private:
  const attention::RowSource& inner_;
  int64_t prepared_dim_;
};

}  // namespace veloxquant
