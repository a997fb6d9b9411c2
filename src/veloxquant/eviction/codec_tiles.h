#pragma once
// Attention over rows a (coded, not exact) RowCodec wrote, one driver tile at a time: the tile's
// rows are decoded once into the driver's scratch (the codec's tile kernel: SIMD for 2- and
// 4-bit group-affine rows) and read there by every query of the tile. Shared by the eviction
// caches' reader (eviction_row_source.h) and age_tiered's tiers (caches/age_tier_rows.h).
#include <cstddef>
#include <cstdint>

#include "veloxquant/attention/row_source.h"
#include "veloxquant/eviction/row_codec.h"

namespace veloxquant::eviction {

// One head's coded rows: row j starts at head_rows + j * row_bytes and decodes to `dim` floats.
struct CodedHeadRows {
  const RowCodec& codec;
  const std::byte* head_rows;
  int64_t row_bytes;
  int64_t dim;
};

// scores[r * ld + (j - j0)] = <prepared query r, decoded row j>, rows j in [j0, j1).
void score_coded_tile(const CodedHeadRows& rows, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                      float* scores, int64_t ld, attention::TileScratch& scratch);

// acc[r * dim + e] += sum over j in [j0, j1) of weights[r * ld + (j - j0)] * decoded row j [e].
void accumulate_coded_tile(const CodedHeadRows& rows, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                           int64_t ld, float* acc, attention::TileScratch& scratch);

}  // namespace veloxquant::eviction
