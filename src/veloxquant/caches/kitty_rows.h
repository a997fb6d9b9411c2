#pragma once
// kitty's storage (caches/kitty_cache.h) as one RowSource for the attention driver: quantized key
// blocks scored from their two code planes, the tail's keys from the input dtype, and every value
// row from the exact values.
//
// A block's channels split into its high set H (mask bits) and low set L, each coded per channel
// over the block's rows with (scale s_c, min m_c), so for a query q and row t of the block:
//   <q, k_t> = sum_{c in H} (q_c s_c) hcode_tc + sum_{c in L} (q_c s_c) lcode_tc + sum_c q_c m_c
// The query is folded into the block's scales once per block (gathered into H's and L's order),
// then each row costs one unpack per plane and Dk multiply-adds shared by all queries of the tile.
// When both planes are 2, 4 or 8 bits wide, the folded query is rounded to 16-bit integers per
// block and plane (a step per plane) and each plane's codes are scored by pairwise integer multiply-adds straight
// from their bytes (attention/narrow_plane_scores.h: planes of 8 or 12 bytes read padded to the
// kernel's 16). Other widths: a plane whose width and bits allow it is unpacked by SIMD planes,
// in the plane's code order, its folded query gathered in that order, and scored in f32.
#include <cstdint>
#include <vector>

#include "lm/tensor.h"
#include "veloxquant/attention/code_rows.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/narrow_plane_scores.h"
#include "veloxquant/attention/row_source.h"

namespace veloxquant {

class KittyRows final : public attention::RowSource {
 public:
  // The quantized keys (rows below `frontier`): both planes' codes, the blocks' (scale, min)
  // per channel and which channels are in the high plane.
  struct QuantizedKeys {
    const lm::Tensor& hi_codes;
    const lm::Tensor& lo_codes;
    const lm::Tensor& params;
    const lm::Tensor& hi_mask;
  };

  // rows: every stored row of a head (quantized ones below `frontier`, tail rows after it).
  KittyRows(const QuantizedKeys& keys, const lm::Tensor& tail_keys, const lm::Tensor& values, int64_t frontier,
            int64_t rows, int group, const attention::CodeOrder& hi_order, const attention::CodeOrder& lo_order);

  int64_t key_dim() const override { return dk_; }
  int64_t value_dim() const override { return values_.dim; }
  int64_t rows(int64_t, int64_t) const override { return rows_; }
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, attention::TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, attention::TileScratch& scratch) const override;

 private:
  // Rows [a, a + n) of one block scored as integers from both planes (attention/
  // narrow_plane_scores.h): pairs = the block's (scale, min) per channel, interleaved.
  void score_block_integer(int64_t b, int64_t h, int64_t block, int64_t a, int64_t n, const float* prepared,
                           int64_t n_queries, const float* pairs, float* scores, int64_t ld) const;

  const lm::Tensor& hi_codes_;
  const lm::Tensor& lo_codes_;
  const lm::Tensor& key_params_;
  const lm::Tensor& hi_mask_;
  attention::PlainRows tail_keys_, values_;
  int64_t frontier_, rows_, dk_;
  int group_;
  // How each plane's packed rows unpack (attention/code_rows.h): planar widths by SIMD planes in
  // a permuted order, the others in natural order; the folded query follows the same order.
  const attention::CodeOrder& hi_order_;
  const attention::CodeOrder& lo_order_;
  // Each plane read padded for the integer key kernel; integer_: both planes (2, 4 or 8 bits) can.
  attention::kernels::NarrowPlane hi_plane_, lo_plane_;
  bool integer_;
  int32_t hi_limit_ = 0, lo_limit_ = 0;
};

}  // namespace veloxquant
