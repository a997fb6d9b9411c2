#pragma once
// The k rows of most mass out of n, ties to the lower index, written in ascending index order:
// the set the k first rows of a stable sort by mass (descending) hold — a2ats's retrieval
// (caches/a2ats_cache.cpp) picks its far rows so at every attention call.
//
// Selection without comparison sorting: the masses as order-preserving 64-bit keys, the k-th
// largest key found by a radix select (an 8-bit digit just below the highest bit in which the
// remaining candidates differ, so each pass splits them wherever they lie), then one pass that
// writes every row above it and the first rows equal to it. O(n) with no data-dependent
// branches in the full passes, which are SIMD (Highway: the keys, the candidates' compaction and,
// when every key equal to the threshold is taken, the chosen indices by compress-store);
// std::nth_element over (mass, index) plus a sort of the chosen indices spent its time in
// mispredicted compares (~18% of a 4k decode step).
//
// Doubles are ordered as numbers (-0 below +0; NaN above +inf); masses are sums of non-negative
// terms, so neither -0 nor NaN arises from finite scores.
#include <cstdint>
#include <vector>

namespace veloxquant {

// Requires 0 <= k <= n; out holds k indices. keys and candidates are scratch (grown as needed).
void top_mass_rows(const double* mass, int64_t n, int64_t k, std::vector<uint64_t>& keys,
                   std::vector<uint64_t>& candidates, int32_t* out);

}  // namespace veloxquant
