#pragma once
// Weight × activations products straight from the GGML block formats (no whole-tensor
// dequantization), threaded over output rows with base::ThreadPool.
#include <cstdint>

#include "lm/weights/weight_matrix.h"

namespace base {
class ThreadPool;
}

namespace lm::kernels {

// y[r] = dot(W row r, x) for r in [0, W.rows). x has W.cols floats. pool may be null (serial).
void matvec(const WeightMatrix& w, const float* x, float* y, base::ThreadPool* pool);

// Y[t, r] = dot(W row r, X[t, :]) for t in [0, n_tokens): X is [n_tokens, W.cols] row-major,
// Y is [n_tokens, W.rows]. For a few tokens each dot decodes the blocks in registers
// (vec_dot); for prefill-sized batches each weight row is dequantized once into an f32
// buffer and reused for every token while it is hot in L1. Either way each output element is
// computed by one thread, so results do not depend on the thread count.
void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, base::ThreadPool* pool);

// The same product through vec_dot_reference (slow; for tests).
void matmul_reference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y);

}  // namespace lm::kernels
