#pragma once
// SIMD inner loops of the attention driver and of the row sources (Highway, dispatched at run
// time), each with a plain scalar reference the tests hold it to (sums differ only by float
// reassociation).
//
// Both loops serve a block of queries at once: every f32 row is loaded once and used by all
// n_q queries of the block (the GQA group heads x the queries of a prefill tile), which is the
// point of scoring a tile for the whole group instead of per query head.
#include <cstdint>

#include "lm/kernels/attention_tiles.h"
#include "veloxquant/attention/group_value_targets.h"

namespace veloxquant::attention::kernels {

// The multi-query f32 loops live with the host's attention, which runs the same tiles:
// score_rows, accumulate_rows and scale_and_max (lm/kernels/attention_tiles.h).
using lm::kernels::tiles::accumulate_rows;
using lm::kernels::tiles::accumulate_rows_f16;
using lm::kernels::tiles::scale_and_max;
using lm::kernels::tiles::score_rows;

// Group-affine codes to f32: out[e] = codes[e] * scale[e / group] + min[e / group] for e < n, codes
// one byte each (already unpacked). Used by sources whose rows are (scale, min) groups.
void affine_decode(const uint8_t* codes, const float* scale, const float* min, int64_t group, int64_t n, float* out);

// Rows of packed b-bit codes (b in 1, 2, 4, 8), `plane_bytes` bytes each, `row_stride` bytes
// apart, read by planes: out[j * 8/b * P + k * P + p] = (row_j[p] >> (k * b)) & (2^b - 1) for
// k < 8 / b (P = plane_bytes). Plane order is a fixed permutation of a row's natural order
// (code_rows.h) that unpacks with whole-vector shifts, no shuffles. One dispatch per tile.
void unpack_planes(const uint8_t* bytes, int64_t row_stride, int64_t n_rows, int64_t plane_bytes, int bits, float* out);

// Rows of two-stage codebook codes read by planes (same order as unpack_planes): for row j
// (streams s1 + j * row_stride, s2 + j * row_stride), out[j * 8/b * P + k * P + p] = c1[i1] + c2[i2]
// with i1 = (s1[p] >> (k * b)) & (2^b - 1), i2 likewise from s2 (s2 == nullptr: c1 alone).
// b in 1, 2, 4, 8; c1 and c2 hold 2^b centroids.
void centroid_planes(const uint8_t* s1, const uint8_t* s2, int64_t row_stride, int64_t n_rows, int64_t plane_bytes,
                     int bits, const float* c1, const float* c2, float* out);

// Interleaved (first, second) pairs read in a permuted order: first[c] = pairs[2 * natural[c]],
// second[c] = pairs[2 * natural[c] + 1] for c < n (a key group's per-channel (scale, min)
// into code order).
void gather_pairs(const float* pairs, const int32_t* natural, int64_t n, float* first, float* second);

// Group-affine keys: folded[r * d + c] = q[r * d + c] * scale[c] and bias[r] = sum_c q[r * d + c]
// * min[c] for r < n_q, so a key row's score is folded . codes + bias.
void fold_scales(const float* q, int64_t n_q, int64_t d, const float* scale, const float* min, float* folded,
                 float* bias);

// Group-affine values: out[j] = w[j] * scale[j] for j < n; returns sum_j w[j] * min[j] (the
// weights scaled by each row's group scale, and the group's bias).
float scale_column(const float* w, int64_t n, const float* scale, const float* min, float* out);

// Rows of `stride` f16 fields into f32 columns: columns[c * n + j] = rows[j * stride + c] (a
// tile's per-row (scale, min) pairs into one column per field).
void f16_columns(const uint16_t* rows, int64_t n, int64_t stride, float* columns);

// Back from plane order to natural order: out[p * per_byte + k] += planes[k * plane_len + p]
// (per_byte = 8 / b codes per byte; 1 is a plain add).
void add_planes_interleaved(const float* planes, int64_t plane_len, int per_byte, float* out);

// Group-affine values accumulated from their packed planes without an f32 tile: for rows j <
// n_rows (`row_stride` bytes apart) and plane position e' = k * P + p (P = plane_bytes, natural
// channel c = p * 8/b + k, channel group g = c / group):
//   acc[r * acc_stride + e'] += ws[(g * n_q + r) * n_rows + j] * code_j(e'),
// after acc[r * acc_stride + e'] += bias[g * n_q + r] when bias is given (the groups' sum_j w_j m_jg).
// Needs can_accumulate_planes(bits, P, group) (every 8-byte chunk inside one channel group).
struct PlaneValueRows {
  const uint8_t* bytes;
  int64_t row_stride;  // bytes
  int64_t n_rows;
  int64_t plane_bytes;
  int bits;
  int64_t group;
};
bool can_accumulate_planes(int bits, int64_t plane_bytes, int64_t group);
void accumulate_planes(const PlaneValueRows& rows, const GroupValueTargets& out);

// Name of the instruction set the dispatcher picked (for reports).
const char* target_name();

namespace scalar {
void gather_pairs(const float* pairs, const int32_t* natural, int64_t n, float* first, float* second);
void accumulate_planes(const PlaneValueRows& rows, const GroupValueTargets& out);
void fold_scales(const float* q, int64_t n_q, int64_t d, const float* scale, const float* min, float* folded,
                 float* bias);
float scale_column(const float* w, int64_t n, const float* scale, const float* min, float* out);
void f16_columns(const uint16_t* rows, int64_t n, int64_t stride, float* columns);
void add_planes_interleaved(const float* planes, int64_t plane_len, int per_byte, float* out);
using lm::kernels::tiles::scalar::accumulate_rows;
using lm::kernels::tiles::scalar::scale_and_max;
using lm::kernels::tiles::scalar::score_rows;
void affine_decode(const uint8_t* codes, const float* scale, const float* min, int64_t group, int64_t n, float* out);
void unpack_planes(const uint8_t* bytes, int64_t row_stride, int64_t n_rows, int64_t plane_bytes, int bits, float* out);
void centroid_planes(const uint8_t* s1, const uint8_t* s2, int64_t row_stride, int64_t n_rows, int64_t plane_bytes,
                     int bits, const float* c1, const float* c2, float* out);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
