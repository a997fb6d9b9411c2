#pragma once
// a2ats's retrieval pass over the far rows' codes (caches/a2ats_cache.cpp) for one query and a
// GQA group of up to four query heads, in SIMD (Highway, dispatched at run time) with the scalar
// loop it replaced as the reference it matches bit for bit.
//
// lut4[(m * entries + c) * 4 + g] is head g's lookup-table entry <q_g,m, centroid c of sub-vector
// m> (lanes g >= group zero). For every row j (codes + j * stride, `subs` bytes):
//   dot_g = ((0 + lut4[m=0][code_0][g]) + lut4[m=1][code_1][g]) + ...   (float adds, m in order)
//   dots[g][j] = dot_g (when dots is given), logits[g][j] = dot_g * scale,
//   top[g] = the largest logit (std::max(top, logit) in row order: a NaN logit never wins)
// The rows' four sums are one 128-bit add per sub-vector as before; what changed is the rest:
// the per-head scale, stores and running maximum, which the scalar loop spent one shuffle, two
// stores, a multiply and a max per row and head on, are done 16 rows per instruction on AVX-512.
#include <cstdint>

namespace veloxquant {

constexpr int64_t kA2atsScanLanes = 4;

// One query's lookup table lut[m * entries + c] = <query_m, centroid c of sub-vector m> from the
// f32 codebook [subs][sub][entries], as a2ats_lookup_table's axpys form it (0, then one fused
// multiply-add per coordinate k in order: lm::kernels::simd::axpy_f32's MulAdd) but with each
// vector of entries kept in a register over the `sub` coordinates instead of stored and reloaded
// per coordinate (64 dispatched calls per table before). Returns false, writing nothing, where
// entries is not a whole number of vectors (axpy_f32's scalar tail would round differently).
bool a2ats_fused_table(const float* centroids, int64_t subs, int64_t entries, int64_t sub, const float* query,
                       float* lut);

// The tables of a GQA group's queries (group <= 4), each as a2ats_fused_table forms it, written
// interleaved as a2ats_interleave_tables would lay them out: every centroid vector is read once
// for the group instead of once per query (the f32 codebook is 64 KiB at the defaults, more than
// L1). Returns false, writing nothing, where a2ats_fused_table would.
bool a2ats_group_tables(const float* centroids, int64_t subs, int64_t entries, int64_t sub, const float* const* queries,
                        int64_t group, float* lut4);

// lut4[i * 4 + g] = tables[g * size + i] for g < group, 0 for the other lanes (group <= 4): the
// group's tables [group][size] interleaved.
void a2ats_interleave_tables(const float* tables, int64_t group, int64_t size, float* lut4);

// The group's interleaved tables (lut4 above) and the rows they score.
struct A2atsTables {
  const float* lut4;
  int64_t subs, entries;
};
struct A2atsCodeRows {
  const uint8_t* codes;  // row j's `subs` code bytes at codes + j * stride
  int64_t stride, n;
};
// dots: nullptr, or `group` row pointers; logits: `group` row pointers; top: `group` floats.
struct A2atsScanOut {
  float* const* dots;
  float* const* logits;
  float* top;
};

void a2ats_scan_rows(const A2atsTables& tables, const A2atsCodeRows& rows, int64_t group, float scale,
                     const A2atsScanOut& out);

namespace scalar {
void a2ats_interleave_tables(const float* tables, int64_t group, int64_t size, float* lut4);
void a2ats_scan_rows(const A2atsTables& tables, const A2atsCodeRows& rows, int64_t group, float scale,
                     const A2atsScanOut& out);
}  // namespace scalar

}  // namespace veloxquant
