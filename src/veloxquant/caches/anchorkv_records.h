#pragma once
// anchorkv's per-row records (caches/anchorkv_cache.h: three u32 per compressed row — key anchor |
// f16 key coefficient << 16, the same for the value, residual slot or 0xFFFFFFFF) read for one
// attention tile in SIMD, and the tile's anchor scores taken from the head's anchor table.
//
// Why: at 4k the scalar record loop (one field split, one f16 widen batch and one branch per
// row, twice per tile) and the per-row score loop were 13% of a 1-thread decode step. Highway,
// dispatched at run time: 16 records per vector deinterleaved, the rows with a residual
// compressed out, the scores one gather and one multiply per 16 rows and query. Each result is
// the scalar reference's exactly (integer fields, an exact f16 widening, one rounded product).
#include <cstdint>

namespace veloxquant {

// One tile's records of one stream (field 0: keys, 1: values), rows [0, n), n <= 64, the
// records back to back (3 u32 each): anchor[j], coef[j], and the rows with a residual in
// order — their place in the tile (at) and slot — returning how many.
int64_t read_anchor_records(const uint32_t* records, int64_t n, int field, int32_t* anchor, float* coef, int32_t* at,
                            uint32_t* slot);

// scores[r * ld + j] = coef[j] * table[r * n_anchor + anchor[j]] for r < n_q, j < n.
void anchor_row_scores(const int32_t* anchor, const float* coef, int64_t n, const float* table, int64_t n_anchor,
                       int64_t n_q, float* scores, int64_t ld);

namespace scalar {
int64_t read_anchor_records(const uint32_t* records, int64_t n, int field, int32_t* anchor, float* coef, int32_t* at,
                            uint32_t* slot);
void anchor_row_scores(const int32_t* anchor, const float* coef, int64_t n, const float* table, int64_t n_anchor,
                       int64_t n_q, float* scores, int64_t ld);
}  // namespace scalar

}  // namespace veloxquant
