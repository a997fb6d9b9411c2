#include "veloxquant/caches/window_call_rows.h"

#include <algorithm>

#include "lm/kernels/attention_tiles.h"

namespace veloxquant {

WindowCallRows::WindowCallRows(const lm::Tensor& tail_k, const lm::Tensor& tail_v, int64_t tail,
                               const lm::Tensor& call_k, const lm::Tensor& call_v)
    : tail_k_(attention::PlainRows::of(tail_k)),
      tail_v_(attention::PlainRows::of(tail_v)),
      call_k_(attention::PlainRows::of(call_k)),
      call_v_(attention::PlainRows::of(call_v)),
      tail_(tail),
      s_(call_k.dim(2)) {}

void WindowCallRows::widen(bool keys, int64_t b, int64_t h, int64_t a, int64_t e, float* out) const {
  const attention::PlainRows& tail = keys ? tail_k_ : tail_v_;
  const attention::PlainRows& call = keys ? call_k_ : call_v_;
  const int64_t tail_end = std::min(e, tail_);
  if (a < tail_end) tail.widen(b, h, a, tail_end, out);
  const int64_t c0 = std::max(a, tail_);
  if (c0 < e) call.widen(b, h, c0 - tail_, e - tail_, out + (c0 - a) * tail.dim);
}

void WindowCallRows::score(int64_t b, int64_t h, int64_t a, int64_t e, const float* queries, int64_t q_stride,
                           int64_t n_queries, float* scores, int64_t ld, attention::TileScratch& scratch) const {
  if (a >= e) return;
  const int64_t d = key_dim();
  float* k = scratch.f32(static_cast<std::size_t>((e - a) * d));
  widen(true, b, h, a, e, k);
  // The shared SIMD tile kernels (lm/kernels/attention_tiles.h): every query of the block on a
  // vector's width of rows per pass, not one scalar dot product per (row, query).
  lm::kernels::tiles::score_rows(queries, q_stride, n_queries, k, d, e - a, d, scores, ld);
}

void WindowCallRows::accumulate(int64_t b, int64_t h, int64_t a, int64_t e, const float* weights, int64_t n_queries,
                                int64_t ld, float* acc, attention::TileScratch& scratch) const {
  if (a >= e) return;
  const int64_t dv = value_dim();
  float* v = scratch.f32_second(static_cast<std::size_t>((e - a) * dv));
  widen(false, b, h, a, e, v);
  lm::kernels::tiles::accumulate_rows(weights, ld, n_queries, v, dv, e - a, dv, acc, dv);
}

}  // namespace veloxquant
