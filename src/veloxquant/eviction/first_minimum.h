#pragma once
// The per-token victim search of the attention-scored policies over scores held in live order
// (eviction_policy.cpp keep_per_token): the first minimum, found in SIMD. The scalar search it
// replaces waited on a compare-and-select chain per row (h2o at 2,580 rows: 2,580 rows a token).
#include <cstdint>

namespace veloxquant::eviction {

// The index of the first minimum of x[0, n), n > 0, as the loop "take i when i == 0 or x[i] <
// best" finds it: a NaN is taken only at index 0 (nothing compares below it), skipped anywhere
// else; +0 and -0 compare equal, so the first of them wins.
int64_t first_minimum(const float* x, int64_t n);

namespace scalar {
int64_t first_minimum(const float* x, int64_t n);  // that loop
}  // namespace scalar

}  // namespace veloxquant::eviction
