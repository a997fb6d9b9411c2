#pragma once
// Queries split by a per-block channel mask into two integer planes (kitty's high- and
// low-precision key channels, caches/kitty_rows.h): for each query, the channels whose mask bit is
// set form plane 0 in ascending channel order, the others plane 1; each plane is rounded to 16-bit
// integers with a step of its own and written in the plane's padded code order
// (narrow_plane_scores.h), zeros at the padding.
//
// The rounding is fold_queries_i16's (integer_key_scores.h) with unit scales and zero mins over the
// plane's values: step = max |x| / limit (NaN when any value is not finite, 0 for a zero plane),
// q = round-half-even(x * (limit / max |x|)). So the integers and steps are bit-identical to
// gathering each plane into its padded order first and calling fold_queries_i16 on it; the SIMD
// targets split the channels by compressing whole vectors under the mask instead of one channel at
// a time.
#include <cstdint>

namespace veloxquant::attention::kernels {

// One plane's padded code order: natural index i goes to position (i % per_byte) * padded +
// i / per_byte (NarrowPlane::position); a query of the plane is dim int16 long.
struct SplitPlane {
  int per_byte = 1;  // codes per byte: 1, 2 or 4 (nothing else)
  int64_t padded = 0;
  int64_t dim = 0;
  int32_t limit = 0;  // integer_query_limit of the plane
};

// For r < n_q: x[r * d + c] (c < d) split by mask bit c (mask[c / 32] >> (c % 32) & 1), plane 0 to q16_0[r *
// planes[0].dim ...] with step0[r], plane 1 to q16_1[r * planes[1].dim ...] with step1[r]. A plane with dim 0 is
// skipped (its channels must then be none).
void split_queries_i16(const float* x, int64_t n_q, int64_t d, const uint32_t* mask, const SplitPlane* planes,
                       int16_t* q16_0, float* step0, int16_t* q16_1, float* step1);

namespace detail {
// split_queries_i16's grow-only per-thread scratch, handed to the dispatched kernel: both planes'
// channel lists, source channels and lane flags (ints), one padded plane of floats.
struct SplitQueryScratch {
  int32_t* ints;
  float* floats;
};
}  // namespace detail

namespace scalar {
void split_queries_i16(const float* x, int64_t n_q, int64_t d, const uint32_t* mask, const SplitPlane* planes,
                       int16_t* q16_0, float* step0, int16_t* q16_1, float* step1);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
