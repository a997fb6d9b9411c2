#pragma once
// Keys of turboquant_block's query-aware split (key_split, caches/turboquant_block_split_keys.h)
// scored in f32 from their codes (Highway, dispatched at run time; the SIMD loop matches its
// scalar reference bit for bit). A row is a few groups of transformed coordinates, each one
// block: dense b-bit codes (b <= 4) on its own 2^b levels and one one-byte log scale
// (quant/log8_scale.h), looked up as f32 in `scale_table`.
//
// Per group the levels sit in registers (b <= 3: the 8 levels in one; b = 4: two, picked by the
// code's top bit), 8 codes spread to their lanes by one broadcast and one variable shift and
// looked up by lane permutes, then one FMA per 8 elements and query. In lanes l < 8 (element
// offset_g + 8c + l of chunk c of group g):
//
//   t_g[l]      = fma(level_g[code(offset_g + 8c + l)], q[r][offset_g + 8c + l], t_g[l]) over the
//                 chunks c of group g in order (the first a product)
//   acc[l]      = fma(t_g[l], scale_g, acc[l]) over the groups in order (the first a product)
//   score(r, j) = ((((acc0 + acc1) + (acc2 + acc3)) + ((acc4 + acc5) + (acc6 + acc7))) + bias[r]
//
// (bias nullptr: 0). The query is read in the transformed basis (group 0's coordinates first).
#include <cstdint>

namespace veloxquant::attention::kernels {

struct SplitLevelKeys {
  static constexpr int kMaxGroups = 4;
  const uint8_t* codes = nullptr;  // row j's codes at codes + j * code_stride
  int64_t code_stride = 0;
  const uint8_t* scales = nullptr;  // row j's group scale codes at scales + j * scale_stride
  int64_t scale_stride = 0;
  int64_t n_rows = 0;
  int n_groups = 0;
  int channels[kMaxGroups] = {};         // a multiple of 8
  int bits[kMaxGroups] = {};             // 1..4
  int offset[kMaxGroups] = {};           // first coordinate of the group (query and key)
  int code_offset[kMaxGroups] = {};      // first code byte of the group within a row
  const float* levels[kMaxGroups] = {};  // 2^bits levels each
  const float* scale_table = nullptr;    // 256 scales, index = scale code
};

// Whether the shape is valid for both paths (1..4 groups of a multiple of 8 channels at 1..4 bits).
bool valid_split_level_keys(const SplitLevelKeys& keys);

// scores[r * ld + j] = score(r, j) for rows j < keys.n_rows and queries r < n_q (q + r * q_stride).
void score_split_level_rows(const SplitLevelKeys& keys, const float* q, int64_t q_stride, const float* bias,
                            int64_t n_q, float* scores, int64_t ld);

namespace scalar {
void score_split_level_rows(const SplitLevelKeys& keys, const float* q, int64_t q_stride, const float* bias,
                            int64_t n_q, float* scores, int64_t ld);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
