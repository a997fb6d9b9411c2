#pragma once
// The Gram matrix of a block of rows, G = sum_j m_j m_j^T (upper triangle), in double: curdkv's
// value leverage scores (leverage_scores.h) form it for every kv head of every layer at every
// decode step (hundreds of kept rows x dim^2 / 2 multiply-adds), which made it most of curdkv's
// decode step as a scalar loop. SIMD (Highway, dispatched at run time) in register tiles of G
// (8 rows x 2 vectors) that the block's rows stream through: each element still sums
// m_j[r] * m_j[c] over j in order, as one fused multiply-add per term on targets with FMA
// (AVX2, AVX3) and as a multiply then an add on the others (the file is built without FMA
// contraction), so the result is, bit for bit, the scalar loop of the same kind:
// scalar::accumulate_upper_gram_fused or scalar::accumulate_upper_gram (upper_gram_fuses()).
#include <cstdint>

namespace veloxquant::eviction {

// gram[r * dim + c] += sum over j in [0, count) of rows[j * dim + r] * rows[j * dim + c], for
// every c >= r. Entries below the diagonal may be written too (callers mirror the upper half).
void accumulate_upper_gram(const double* rows, int64_t count, int64_t dim, double* gram);
// Whether the dispatched target's accumulate_upper_gram fuses each multiply-add.
bool upper_gram_fuses();

namespace scalar {
void accumulate_upper_gram(const double* rows, int64_t count, int64_t dim, double* gram);
// The same with each term added by std::fma (what FMA targets give).
void accumulate_upper_gram_fused(const double* rows, int64_t count, int64_t dim, double* gram);
}  // namespace scalar

}  // namespace veloxquant::eviction
