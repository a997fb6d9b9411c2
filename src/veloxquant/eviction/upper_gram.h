#pragma once
// The Gram matrix of a block of rows, G = sum_j m_j m_j^T (upper triangle), in double: curdkv's
// value leverage scores (leverage_scores.h) form it for every kv head of every layer at every
// decode step (hundreds of kept rows x dim^2 / 2 multiply-adds), which made it most of curdkv's
// decode step as a scalar loop. SIMD (Highway, dispatched at run time) in register tiles of G
// (8 rows x 2 vectors) that the block's rows stream through: each element still sums
// m_j[r] * m_j[c] over j in order, a multiply then an add (the file is built without FMA
// contraction), so the result is the scalar loop's, bit for bit.
#include <cstdint>

namespace veloxquant::eviction {

// gram[r * dim + c] += sum over j in [0, count) of rows[j * dim + r] * rows[j * dim + c], for
// every c >= r. Entries below the diagonal may be written too (callers mirror the upper half).
void accumulate_upper_gram(const double* rows, int64_t count, int64_t dim, double* gram);

namespace scalar {
void accumulate_upper_gram(const double* rows, int64_t count, int64_t dim, double* gram);
}  // namespace scalar

}  // namespace veloxquant::eviction
