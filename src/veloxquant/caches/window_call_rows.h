#pragma once
// The exact part of a call that a2ats and anchorkv attend over in one RowSource (the shared driver
// wants one prepared-query form per call): the cache's exact window (tail) followed by the call's
// own rows, indexed 0 .. tail + s - 1, read from their input-dtype tensors.
#include <cstdint>

#include "lm/tensor.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/row_source.h"

namespace veloxquant {

class WindowCallRows {
 public:
  // tail_k/tail_v [B, H, cap, D] holding `tail` rows per head; call_k/call_v [B, H, s, D].
  WindowCallRows(const lm::Tensor& tail_k, const lm::Tensor& tail_v, int64_t tail, const lm::Tensor& call_k,
                 const lm::Tensor& call_v);
  int64_t rows() const { return tail_ + s_; }
  int64_t key_dim() const { return tail_k_.dim; }
  int64_t value_dim() const { return tail_v_.dim; }
  // Rows [a, e) (exact-part indices) of (b, h) widened to f32 [e - a, dim].
  void widen(bool keys, int64_t b, int64_t h, int64_t a, int64_t e, float* out) const;
  // scores[r * ld + (j - a)] = <queries + r * q_stride, key j> for j in [a, e), r < n_queries.
  void score(int64_t b, int64_t h, int64_t a, int64_t e, const float* queries, int64_t q_stride, int64_t n_queries,
             float* scores, int64_t ld, attention::TileScratch& scratch) const;
  // acc[r * Dv + c] += sum_j weights[r * ld + (j - a)] * value j [c].
  void accumulate(int64_t b, int64_t h, int64_t a, int64_t e, const float* weights, int64_t n_queries, int64_t ld,
                  float* acc, attention::TileScratch& scratch) const;

 private:
  attention::PlainRows tail_k_, tail_v_, call_k_, call_v_;
  int64_t tail_, s_;
};

}  // namespace veloxquant
