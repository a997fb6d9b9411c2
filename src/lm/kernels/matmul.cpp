#include "lm/kernels/matmul.h"

#include <algorithm>
#include <vector>

#include "base/thread_pool.h"
#include "lm/weights/dequantize.h"
#include "lm/kernels/i16_activations.h"
#include "lm/kernels/simd_dequantize.h"
#include "lm/kernels/simd_dot.h"
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

void matvec(const WeightMatrix& w, const float* x, float* y, base::ThreadPool* pool, Activations activations) {
  matmul(w, x, 1, y, pool, activations);
}

namespace {

// Work units of one product: single rows on the decode path, groups of four rows (starting at
// multiples of 4) on the prefill path.
int64_t unit_count(const WeightMatrix& w, int64_t n_tokens) {
  return n_tokens >= kDequantizeFromTokens ? (w.rows + 3) / 4 : w.rows;
}

// xq: x quantized to I16 blocks (n_tokens * cols / 32 of them), or null for f32 activations.
void compute_units(const WeightMatrix& w, const float* x, const I16Block* xq, int64_t n_tokens, float* y, int64_t begin,
                   int64_t end) {
  if (n_tokens < kDequantizeFromTokens && xq && has_i16_dot(w.type)) {
    const int64_t blocks_per_token = w.cols / kI16Block;
    for (int64_t t = 0; t < n_tokens; ++t) {
      vec_dot_i16_rows(w.type, w.row(begin), w.row_bytes, end - begin, xq + t * blocks_per_token, w.cols,
                       y + t * w.rows + begin);
    }
    return;
  }
  if (n_tokens < kDequantizeFromTokens) {
    for (int64_t r = begin; r < end; ++r) {
      const std::byte* row = w.row(r);
      for (int64_t t = 0; t < n_tokens; ++t) y[t * w.rows + r] = vec_dot(w.type, row, x + t * w.cols, w.cols);
    }
    return;
  }
  // Prefill: four rows decoded to f32 at a time, then each token against all four. Groups
  // start at multiples of 4 in absolute row numbers (the pool splits groups, not rows), so
  // which kernel computes a row never depends on the thread count.
  thread_local std::vector<float> decoded;
  const std::size_t need = static_cast<std::size_t>(4 * w.cols);
  if (decoded.size() < need) decoded.resize(need);
  for (int64_t group = begin; group < end; ++group) {
    const int64_t r = 4 * group;
    if (r + 4 > w.rows) {
      for (int64_t rr = r; rr < w.rows; ++rr) {
        for (int64_t t = 0; t < n_tokens; ++t) y[t * w.rows + rr] = vec_dot(w.type, w.row(rr), x + t * w.cols, w.cols);
      }
      continue;
    }
    const float* rows = nullptr;
    if (w.type == GgmlType::F32) {
      rows = reinterpret_cast<const float*>(w.row(r));
    } else {
      for (int k = 0; k < 4; ++k) dequantize_row_fast(w.type, w.row(r + k), decoded.data() + k * w.cols, w.cols);
      rows = decoded.data();
    }
    // Tokens four at a time through the 4x4 register tile, the rest one by one. Which kernel
    // handles a token depends only on n_tokens, never on the thread split.
    int64_t t = 0;
    for (; t + 4 <= n_tokens; t += 4) {
      float out[16];
      simd::dot_f32_rows4x4(rows, w.cols, x + t * w.cols, w.cols, w.cols, out);
      for (int tt = 0; tt < 4; ++tt) {
        for (int k = 0; k < 4; ++k) y[(t + tt) * w.rows + r + k] = out[tt * 4 + k];
      }
    }
    for (; t < n_tokens; ++t) {
      float out[4];
      simd::dot_f32_rows4(rows, w.cols, x + t * w.cols, w.cols, out);
      for (int k = 0; k < 4; ++k) y[t * w.rows + r + k] = out[k];
    }
  }
}

}  // namespace

void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, base::ThreadPool* pool,
            Activations activations) {
  const MatmulJob job{&w, y};
  matmul_many(std::span<const MatmulJob>(&job, 1), x, n_tokens, pool, activations);
}

void matmul_many(std::span<const MatmulJob> jobs, const float* x, int64_t n_tokens, base::ThreadPool* pool,
                 Activations activations) {
  // The jobs' units laid end to end: one parallel_for (one wake-up and one join) for all.
  int64_t offsets[kMaxMatmulJobs + 1] = {0};
  if (jobs.size() > kMaxMatmulJobs) {
    for (const MatmulJob& job : jobs) matmul(*job.w, x, n_tokens, job.y, pool, activations);
    return;
  }
  // Decode with I16 activations: x is quantized once, here on the calling thread, into a
  // buffer that only grows (no allocation per call once the largest width has been seen).
  const I16Block* xq = nullptr;
  if (activations == Activations::kI16 && n_tokens < kDequantizeFromTokens && !jobs.empty()) {
    const int64_t cols = jobs[0].w->cols;
    bool any = false;
    for (const MatmulJob& job : jobs) any = any || (has_i16_dot(job.w->type) && job.w->cols % kI16Block == 0);
    if (any && cols % kI16Block == 0) {
      thread_local std::vector<I16Block> scratch;
      const std::size_t need = static_cast<std::size_t>(n_tokens * cols / kI16Block);
      if (scratch.size() < need) scratch.resize(need);
      quantize_i16(x, n_tokens * cols, scratch.data());
      xq = scratch.data();
    }
  }
  for (std::size_t j = 0; j < jobs.size(); ++j) offsets[j + 1] = offsets[j] + unit_count(*jobs[j].w, n_tokens);
  const int64_t total = offsets[jobs.size()];
  const auto body = [&](int64_t begin, int64_t end) {
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      const int64_t lo = std::max(begin, offsets[j]), hi = std::min(end, offsets[j + 1]);
      if (lo < hi) compute_units(*jobs[j].w, x, xq, n_tokens, jobs[j].y, lo - offsets[j], hi - offsets[j]);
    }
  };
  const int64_t min_units = n_tokens >= kDequantizeFromTokens ? kMinRowsPerChunk / 4 : kMinRowsPerChunk;
  if (pool) {
    pool->parallel_for(total, body, min_units);
  } else {
    body(0, total);
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
