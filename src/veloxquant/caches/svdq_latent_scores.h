#pragma once
// svdq's key scores straight from its packed latent codes (caches/svdq_layout.h), for a decode
// step's few queries: the same numbers as decoding the rows to f32 (svdq_latent_decode.h) and
// scoring them with lm::kernels::tiles::score_rows, bit for bit, without the f32 tile.
//
// Why: at 4k context the two-pass form (decode 40 latent channels per row to memory, read them
// back for the dot products) cost a decode step more than the native cache's f16 key scores
// (decode 15% + scores 9% of a 1-thread profile against the native 12%). Here a row's codes are
// widened in registers and fed to every query at once.
//
// How it stays bit-identical: score_rows sums row j for query r as one FMA chain per lane over the
// row's 8-float chunks, starting from zero, then joins the 8 lanes with a fixed tree (pairs,
// quads, the two 128-bit halves). When every coded group is exactly 8 channels — every group at
// head_dim 64 — a chunk is one group, and its decoded floats are code * scale + min with one FMA
// (svdq_latent_decode's rounding). On AVX-512 two rows share a 512-bit vector (lanes 0-7 and
// 8-15) so each FMA serves two rows, and the tree is the same per 128-bit block. Other targets,
// other layouts and more than 3 queries take the two-pass form itself.
#include <cstdint>

#include "veloxquant/caches/svdq_layout.h"

namespace veloxquant {

// Whether score_latent_codes runs fused for this layout (every group 8 channels of 1, 2, 4 or
// 8 bits, a row at most 32 bytes) on this machine; otherwise it decodes and scores in two passes.
bool latent_codes_fuse(const SvdqLayout& layout);

// A run of coded rows of one block: row j's codes start at first_row + j * row_stride and decode
// with the block's per-coded-channel scale / min (layout.coded floats each).
struct LatentCodeRows {
  const SvdqLayout* layout = nullptr;
  const uint8_t* first_row = nullptr;
  int64_t row_stride = 0;
  int64_t n_rows = 0;
  const float* scale = nullptr;
  const float* min = nullptr;
};

// scores[r * ld + j] = <q_r, decoded row j> for r < n_q, j < rows.n_rows; q_r at q + r * q_stride
// (layout.coded floats). Equal to decode_latent_rows into a tile and score_rows over it with the
// same n_rows (the passes of 8 rows fall from row 0). `scratch` holds n_rows * layout.coded floats
// for the two-pass form.
void score_latent_codes(const LatentCodeRows& rows, const float* q, int64_t q_stride, int64_t n_q, float* scores,
                        int64_t ld, float* scratch);

}  // namespace veloxquant
