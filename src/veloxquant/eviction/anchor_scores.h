#pragma once
// NestedKV's key-only anchor scores (Chen et al., arXiv 2605.26678, as the original adapts its
// Appendix A; spec §6 row 38). Over the n keys of one head in temporal order, unit-normalised
// (norm floor 1e-12):
//   anomalies     a_s = -<k_i, mean of all keys>, a_e = -<k_i, mean of k_i's block> (blocks of
//                 clip(n / 32, 128, 256) positions from the first), a_c = -<k_i, mean of the
//                 `window` keys ending at i>; each min-max normalised to [0, 1] (constant: 0);
//   head blend    weights softmax(log(0.4, 0.4, 0.2) + beta * gap), gap = mean of a scale's top
//                 10% minus its bottom 10% (max(1, round(0.1 n)) values, Python rounding);
//                 one key: the prior weights;
//   surprise gate s_i = population std of (a_s, a_e, a_c)_i, min-max normalised, mean-centred;
//                 alpha = sigmoid(kappa (s_i - tau)); score = (1 - alpha) blend + alpha max(a).
// Higher scores are more anomalous, i.e. kept.
#include <cstdint>

namespace veloxquant::eviction {

struct AnchorParams {
  int64_t window = 64;
  double beta = 3.0;
  double tau = 0.6;
  double kappa = 10.0;
};

// The block size for n keys: clip(n / 32, 128, 256).
int64_t anchor_block_size(int64_t n);

// out[i] for the n keys (row-major, dim floats a key; rows == nullptr: 0..n-1, else keys[rows[i]]).
// The dot products and means run in SIMD (ordered_sums.h) in the scalar loops' order.
void nested_anchor_scores(const float* keys, const int32_t* rows, int64_t n, int64_t dim, const AnchorParams& params,
                          float* out);

namespace scalar {
// The same scores by plain loops, one sum at a time (the reference the tests hold the SIMD
// path to, bit for bit).
void nested_anchor_scores(const float* keys, const int32_t* rows, int64_t n, int64_t dim, const AnchorParams& params,
                          float* out);
}  // namespace scalar

}  // namespace veloxquant::eviction
