#include "lm/kernels/matmul.h"

#include <vector>

#include "base/thread_pool.h"
#include "lm/weights/dequantize.h"
#include "lm/kernels/vec_dot.h"

namespace lm::kernels {

namespace {
// Rows per scheduling unit: enough work per chunk that a decode step on a small model is not
// dominated by the pool's hand-off.
constexpr int64_t kMinRowsPerChunk = 16;
// From this many tokens on, a weight row is dequantized once into an f32 buffer and then
// dotted with every token (f32 SIMD dot), instead of re-decoding its blocks per token.
constexpr int64_t kDequantizeFromTokens = 4;
}  // namespace

void matvec(const WeightMatrix& w, const float* x, float* y, base::ThreadPool* pool) {
  matmul(w, x, 1, y, pool);
}

void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, base::ThreadPool* pool) {
  const bool dequantize_first = n_tokens >= kDequantizeFromTokens && w.type != GgmlType::F32;
  const auto body = [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> decoded;
    if (dequantize_first && decoded.size() < static_cast<std::size_t>(w.cols)) decoded.resize(w.cols);
    for (int64_t r = begin; r < end; ++r) {
      const std::byte* row = w.row(r);
      if (dequantize_first) {
        dequantize_row(w.type, row, decoded.data(), w.cols);
        for (int64_t t = 0; t < n_tokens; ++t) y[t * w.rows + r] = dot_f32(decoded.data(), x + t * w.cols, w.cols);
      } else {
        for (int64_t t = 0; t < n_tokens; ++t) y[t * w.rows + r] = vec_dot(w.type, row, x + t * w.cols, w.cols);
      }
    }
  };
  if (pool) {
    pool->parallel_for(w.rows, body, kMinRowsPerChunk);
  } else {
    body(0, w.rows);
  }
}

void matmul_reference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t r = 0; r < w.rows; ++r) {
      y[t * w.rows + r] = vec_dot_reference(w.type, w.row(r), x + t * w.cols, w.cols);
    }
  }
}

}  // namespace lm::kernels
