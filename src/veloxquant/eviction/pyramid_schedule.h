#pragma once
// PyramidKV's per-layer budgets (spec §4.3 "PyramidKV", the original's quantizers/pyramidkv.py):
// more rows for shallow layers, fewer for deep ones, the mean held at the average budget.
//   1. floor = n_sink + 1;
//   2. span = (avg - floor)(beta - 1); hi = avg + span, lo = avg - span;
//   3. linear taper from hi (layer 0) to lo (last layer);
//   4. water-filling: raise values below the floor to it, then take the excess above avg * n
//      from the unclamped layers in proportion to their slack above the floor; repeat up to n
//      times, stop when the excess <= 1e-9;
//   5. budget = max(round(v), floor) with Python's round (half to even).
// One layer gets [max(avg, floor)]; beta = 1 is flat (every layer avg, which equals H2O).
#include <cstdint>
#include <vector>

namespace veloxquant::eviction {

// Throws QuantizerConfigError for n_layers < 1 or beta < 1 (naming pyramid_beta).
std::vector<int> pyramid_budgets(int average_budget, int n_sink, double beta, std::size_t n_layers);

// Python's round(): nearest integer, halves to even.
int64_t round_half_even(double value);

}  // namespace veloxquant::eviction
