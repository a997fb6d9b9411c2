#pragma once
// Scoring a decode step's queries against a tile of f32 latent rows laid out in row pairs, bit
// for bit as lm::kernels::tiles::score_rows scores the same rows (kvtc's keys,
// caches/latent_rows.h).
//
// Why a layout of its own: score_rows (8 lanes) and the 512-bit latent scorer
// (attention/latent_tiles.h) broadcast every 8-float chunk of a row to one vector, so each
// multiply-add needed a load of its own and the reduction's shuffles competed with the
// multiply-adds; a row width that is not a multiple of 8 (kvtc's ranks: 185-192 on SmolLM2) left
// the last r % 8 elements to scalar FMAs, up to 63 per row for a GQA group of 9. Here a 512-bit
// load holds one chunk of two rows, which three queries' broadcast chunks multiply, and the
// elements past the last whole chunk lie column-major, 8 rows to a vector, so they are vector
// FMAs too. The arithmetic per (query, row) is score_rows': lane l of 8 sums the products of
// the elements e = l mod 8 in order of e by FMA, the lanes are added as
// ((l0 + l2) + (l1 + l3)) + ((l4 + l6) + (l5 + l7)), then the last d % 8 products are added by
// FMA in order.
//
// Tile of n_rows rows (a multiple of 8) of d floats, C = d / 8 chunks, T = d % 8:
//   tile[(p * C + c) * 16 + h * 8 + l]        = row (2p + h), element 8c + l   (p < n_rows / 2)
//   tile[(n_rows / 2) * C * 16 + (g * T + t) * 8 + k] = row (8g + k), element 8C + t
#include <cstdint>

namespace veloxquant::attention::kernels {

// Floats of a pair tile of n_rows rows (a multiple of 8) of d elements.
inline int64_t pair_tile_floats(int64_t n_rows, int64_t d) { return n_rows * d; }

// Whether score_pair_tile runs directly on the tile on this machine (AVX-512). Elsewhere it
// rebuilds the rows and calls score_rows, which is correct but slower than decoding the rows
// plainly: callers keep their plain path there.
bool pair_tiles_direct();

// rows [n_rows, d] (row j at rows + j * row_stride; n_rows a multiple of 8) -> tile.
void pair_tile_from_rows(const float* rows, int64_t row_stride, int64_t n_rows, int64_t d, float* tile);

// scores[r * ld + j] for r < n_q, j < n_rows (a multiple of 8): bit-identical to
// lm::kernels::tiles::score_rows(q, q_stride, n_q, rows, ..., d, scores, ld) over the rows the
// tile holds.
void score_pair_tile(const float* q, int64_t q_stride, int64_t n_q, const float* tile, int64_t n_rows, int64_t d,
                     float* scores, int64_t ld);

}  // namespace veloxquant::attention::kernels
