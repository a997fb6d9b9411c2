#pragma once
// Weight × activations products straight from the GGML block formats (no whole-tensor
// dequantization), threaded over output rows with base::ThreadPool.
#include <cstddef>
#include <cstdint>
#include <span>

#include "lm/weights/weight_matrix.h"

namespace base {
class ThreadPool;
}

namespace lm::kernels {

// What the decode path (fewer than 4 tokens) multiplies quantized weights with: the f32
// activations themselves (the reference), or the activations rounded to 16-bit blocks once
// per call and integer dot products (lm/kernels/i16_activations.h: fewer instructions per
// weight, an error at the level of float rounding). F32/F16/BF16 weights and the prefill path
// always use f32.
enum class Activations { kF32, kI16 };

// y[r] = dot(W row r, x) for r in [0, W.rows). x has W.cols floats. pool may be null (serial).
void matvec(const WeightMatrix& w, const float* x, float* y, base::ThreadPool* pool,
            Activations activations = Activations::kF32);

// Y[t, r] = dot(W row r, X[t, :]) for t in [0, n_tokens): X is [n_tokens, W.cols] row-major,
// Y is [n_tokens, W.rows]. For a few tokens each dot decodes the blocks in registers
// (vec_dot); for prefill-sized batches each weight row is dequantized once into an f32
// buffer and reused for every token while it is hot in L1. Either way each output element is
// computed by one thread, so results do not depend on the thread count.
void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, base::ThreadPool* pool,
            Activations activations = Activations::kF32);

// Several products sharing the same activations (q/k/v, gate/up) in one parallel loop: one
// thread-pool hand-off instead of one per matrix, which matters on short decode steps.
// Each job's output equals what matmul() would write.
struct MatmulJob {
  const WeightMatrix* w;
  float* y;
};
inline constexpr std::size_t kMaxMatmulJobs = 8;
// All jobs share x, so with Activations::kI16 it is quantized once for all of them.
void matmul_many(std::span<const MatmulJob> jobs, const float* x, int64_t n_tokens, base::ThreadPool* pool,
                 Activations activations = Activations::kF32);

// The same product through vec_dot_reference (slow; for tests).
void matmul_reference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y);

}  // namespace lm::kernels
