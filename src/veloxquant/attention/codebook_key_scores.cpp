// Highway kernels for codebook_key_scores.h, compiled once per target and dispatched at run time.
// The AVX3_DL target (which Highway 1.0 compiles only on request: hence the define, before any
// Highway header) adds AVX512-VNNI: vpdpwssd multiplies, pairs and accumulates in one step.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/codebook_key_scores.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/codebook_key_scores.h"
#include "veloxquant/attention/integer_query_step.h"
// The row loop inlines vpdpwssd on AVX3_DL (see VQ_CODEBOOK_VNNI below).
#undef VQ_ROW_SUMS_EXTRA_TARGET
#if HWY_TARGET == HWY_AVX3_DL
#define VQ_ROW_SUMS_EXTRA_TARGET __attribute__((target("avx512vnni")))
#else
#define VQ_ROW_SUMS_EXTRA_TARGET
#endif
#include "veloxquant/attention/integer_row_sums-inl.h"
#include "veloxquant/attention/wide_block_sums-inl.h"

#include <algorithm>
#include <cmath>
#include <limits>

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// 128-bit blocks per i16 vector of the loops below (1 on SSE4, 2 on AVX2, 4 on AVX-512): a
// block holds one code plane's lookups, so a vector serves `blocks` planes at once; with four
// blocks a row's four planes are one pass (half the instructions of the 256-bit loop).
int64_t BlocksImpl() {
#if HWY_TARGET == HWY_SCALAR
  return 1;
#else
  const hn::ScalableTag<int32_t> d32;
  const hn::Repartition<int16_t, decltype(d32)> d16;
  return static_cast<int64_t>(hn::Lanes(d16)) / 8;
#endif
}

#if HWY_TARGET != HWY_SCALAR
// The loops below carry the VNNI attribute on the AVX3_DL target (every function that inlines
// vpdpwssd must), nothing elsewhere. Redefined per target: this file is compiled once per target.
#undef VQ_CODEBOOK_VNNI
#if HWY_TARGET == HWY_AVX3_DL
#define VQ_CODEBOOK_VNNI VQ_WITH_AVX512_VNNI
#else
#define VQ_CODEBOOK_VNNI
#endif

// sum + (pairwise products of a and b, adjacent pairs added): one vpdpwssd with VNNI, else a
// widening multiply-add and an add. Integer sums, so both give the same lanes.
template <class D32, class V16>
VQ_CODEBOOK_VNNI HWY_INLINE hn::Vec<D32> multiply_pairs_add(D32 d32, V16 a, V16 b, hn::Vec<D32> sum,
                                                            hn::Vec<D32>& odd) {
#if HWY_TARGET == HWY_AVX3_DL
  (void)d32;
  (void)odd;
  return hn::Vec<D32>{_mm512_dpwssd_epi32(sum.raw, a.raw, b.raw)};
#else
  return hn::ReorderWidenMulAccumulate(d32, a, b, sum, odd);
#endif
}

// The NQ integer sums of one row: per group of `blocks` planes and 16-byte chunk of the
// streams, the chunk is broadcast to every block, each block shifts out its own plane's 2-bit
// fields (i1 * 4 + i2 as a 4-bit index per byte), two byte lookups give the level's low and
// high bytes, and interleaving them makes two vectors of 16-bit levels.
// kChunks > 0: the 16-byte chunks per plane known at compile time (d / 64; the loops unroll
// and the per-plane shift vectors become constants); 0 reads it from d.
template <int NQ, bool kTwoStages, int kChunks, class D32>
VQ_CODEBOOK_VNNI HWY_INLINE void codebook_row_sums(D32 d32, const uint8_t* s1, const uint8_t* s2, int64_t d,
                                                   const int16_t* q16, hn::Vec<hn::Repartition<uint8_t, D32>> table_lo,
                                                   hn::Vec<hn::Repartition<uint8_t, D32>> table_hi, hn::Vec<D32>* sum) {
  const hn::Repartition<uint8_t, D32> d8;
  const hn::Repartition<int16_t, D32> d16;
  const hn::RebindToUnsigned<D32> du32;
  constexpr int64_t kLanes16 = hn::MaxLanes(d16), kBlocks = kLanes16 / 8;
  const int64_t chunks = kChunks > 0 ? kChunks : d / 64;
  const auto fields = hn::Set(du32, 0x03030303u);
  hn::Vec<D32> odd[NQ];
  for (int r = 0; r < NQ; ++r) sum[r] = odd[r] = hn::Zero(d32);
  // Lane i of a u32 vector lies in block i / 4, which reads plane g * kBlocks + i / 4.
  const auto block_of_lane = hn::ShiftRight<2>(hn::Iota(du32, 0));
  for (int64_t g = 0; g < 4 / kBlocks; ++g) {
    const auto shift = hn::ShiftLeft<1>(hn::Add(block_of_lane, hn::Set(du32, static_cast<uint32_t>(g * kBlocks))));
#pragma GCC unroll 4
    for (int64_t c = 0; c < chunks; ++c) {
      // i1 * 4 + i2 (one stage: i1 * 4): the table is indexed alike either way.
      auto index =
          hn::ShiftLeft<2>(hn::And(hn::Shr(hn::BitCast(du32, hn::LoadDup128(d8, s1 + c * 16)), shift), fields));
      if constexpr (kTwoStages) {
        index = hn::Or(index, hn::And(hn::Shr(hn::BitCast(du32, hn::LoadDup128(d8, s2 + c * 16)), shift), fields));
      }
      const auto index8 = hn::BitCast(d8, index);
      const auto lo = hn::TableLookupBytes(table_lo, index8);
      const auto hi = hn::TableLookupBytes(table_hi, index8);
      const auto first = hn::BitCast(d16, hn::InterleaveLower(d8, lo, hi));
      const auto second = hn::BitCast(d16, hn::InterleaveUpper(d8, lo, hi));
      const int16_t* q = q16 + (g * chunks + c) * 2 * kLanes16;
      for (int r = 0; r < NQ; ++r) {
        sum[r] = multiply_pairs_add(d32, first, hn::LoadU(d16, q + r * d), sum[r], odd[r]);
        sum[r] = multiply_pairs_add(d32, second, hn::LoadU(d16, q + r * d + kLanes16), sum[r], odd[r]);
      }
    }
  }
  for (int r = 0; r < NQ; ++r) sum[r] = hn::RearrangeToOddPlusEven(sum[r], odd[r]);
}

template <int NQ, bool kTwoStages, int kChunks>
VQ_CODEBOOK_VNNI void codebook_block(const CodebookRows& rows, const CodebookLevels16& levels, const int16_t* q16, const float* q_step,
                    float* scores, int64_t ld) {
  const uint8_t* const s1 = rows.s1;
  const uint8_t* const s2 = rows.s2;
  const int64_t row_stride = rows.row_stride, n_rows = rows.n_rows, d = rows.d;
  const hn::ScalableTag<int32_t> d32;
  const hn::Repartition<uint8_t, decltype(d32)> d8;
  HWY_ALIGN uint8_t lo[16], hi[16];
  for (int i = 0; i < 16; ++i) {
    const auto bits = static_cast<uint16_t>(levels.value[i]);
    lo[i] = static_cast<uint8_t>(bits & 0xFF);
    hi[i] = static_cast<uint8_t>(bits >> 8);
  }
  const auto table_lo = hn::LoadDup128(d8, lo), table_hi = hn::LoadDup128(d8, hi);
  float step[NQ];
  for (int r = 0; r < NQ; ++r) step[r] = q_step[r] * levels.step;
  const auto sums = [&](int64_t j, hn::Vec<decltype(d32)> * s) HWY_ATTR VQ_CODEBOOK_VNNI __attribute__((always_inline)) {
    codebook_row_sums<NQ, kTwoStages, kChunks>(d32, s1 + j * row_stride, s2 + (kTwoStages ? j * row_stride : 0), d, q16,
                                               table_lo, table_hi, s);
  };
  score_rows_in_fours<NQ>(d32, n_rows, sums, step, nullptr, scores, ld);
}

template <bool kTwoStages, int kChunks>
VQ_CODEBOOK_VNNI void codebook_queries(const CodebookRows& rows, const CodebookLevels16& levels, const CodebookQueries& queries,
                      float* scores, int64_t ld) {
  const int64_t d = rows.d, n_q = queries.n_q;
  int64_t r = 0;
  for (; r + 3 <= n_q; r += 3) {
    codebook_block<3, kTwoStages, kChunks>(rows, levels, queries.q16 + r * d, queries.q_step + r, scores + r * ld, ld);
  }
  for (; r < n_q; ++r) {
    codebook_block<1, kTwoStages, kChunks>(rows, levels, queries.q16 + r * d, queries.q_step + r, scores + r * ld, ld);
  }
}

template <bool kTwoStages>
VQ_CODEBOOK_VNNI void codebook_stages(const CodebookRows& rows, const CodebookLevels16& levels, const CodebookQueries& queries,
                     float* scores, int64_t ld) {
  // Head sizes 64 and 128 unrolled; others loop.
  switch (rows.d / 64) {
    case 1:
      codebook_queries<kTwoStages, 1>(rows, levels, queries, scores, ld);
      break;
    case 2:
      codebook_queries<kTwoStages, 2>(rows, levels, queries, scores, ld);
      break;
    default:
      codebook_queries<kTwoStages, 0>(rows, levels, queries, scores, ld);
      break;
  }
}

VQ_CODEBOOK_VNNI void ScoreCodebookImpl(const CodebookRows& rows, const CodebookLevels16& levels,
                                        const CodebookQueries& queries, float* scores, int64_t ld) {
#if HWY_TARGET == HWY_AVX3_DL
  if (!has_avx512_vnni()) {  // AVX3_DL without AVX512-VNNI: no shipped CPU, but never an illegal instruction
    scalar::score_codebook_rows(rows, levels, queries, scores, ld);
    return;
  }
#endif
  if (rows.s2 != nullptr) {
    codebook_stages<true>(rows, levels, queries, scores, ld);
  } else {
    codebook_stages<false>(rows, levels, queries, scores, ld);
  }
}
#else
void ScoreCodebookImpl(const CodebookRows& rows, const CodebookLevels16& levels, const CodebookQueries& queries,
                       float* scores, int64_t ld) {
  scalar::score_codebook_rows(rows, levels, queries, scores, ld);
}
#endif

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(BlocksImpl);
HWY_EXPORT(ScoreCodebookImpl);

namespace {
// Asked of the dispatched target every time (not cached): the query layout must follow the
// target the scores run on, also when a test switches targets within one process. Called once
// per query, not per row.
int64_t blocks() { return HWY_DYNAMIC_DISPATCH(BlocksImpl)(); }
// Round-to-nearest-even into 16 bits, the same in every caller.
int16_t round16(float x) { return static_cast<int16_t>(std::lrintf(x)); }
// Where codebook_row_sums reads byte p of plane k: plane k = g * blocks + b is read by block b
// of plane group g; chunk c of 16 bytes gives two vectors (bytes 0-7 and 8-15 of the chunk in
// each block).
int64_t lookup_position(int64_t k, int64_t p, int64_t chunks, int64_t n_blocks) {
  const int64_t g = k / n_blocks, b = k % n_blocks, c = p >> 4, o = p & 15;
  return ((g * chunks + c) * 2 + (o >> 3)) * (8 * n_blocks) + b * 8 + (o & 7);
}
}  // namespace

int32_t codebook_integer_limit(int64_t dim) {
  const double bound = std::sqrt(static_cast<double>(std::numeric_limits<int32_t>::max()) / std::max<int64_t>(1, dim));
  return static_cast<int32_t>(std::min(32767.0, std::floor(bound)));
}

CodebookLevels16 codebook_levels16(const float* c1, const float* c2, int32_t limit) {
  float sums[16];
  float max_abs = 0.0f;
  for (int i = 0; i < 16; ++i) {
    sums[i] = c2 != nullptr ? c1[i / 4] + c2[i % 4] : c1[i / 4];
    max_abs = std::max(max_abs, std::fabs(sums[i]));
  }
  CodebookLevels16 out{};
  const QueryStep step = query_step(max_abs, limit);
  out.step = step.step;
  const float inverse = step.inverse;
  for (int i = 0; i < 16; ++i) out.value[i] = round16(sums[i] * inverse);
  return out;
}

bool can_score_codebook_rows(int64_t d) {
  return d > 0 && d % 64 == 0 && 4 % blocks() == 0;  // planes of whole 16-byte chunks
}

int64_t codebook_lookup_position(int64_t position, int64_t d) {
  const int64_t plane_bytes = d / 4;
  return lookup_position(position / plane_bytes, position % plane_bytes, plane_bytes / 16, blocks());
}

void quantize_codebook_query(const float* q, int64_t d, int32_t limit, int16_t* q16, float* step) {
  const QueryStep s = vector_step(q, d, limit);
  *step = s.step;
  if (std::isnan(s.step)) {  // the NaN step makes every score NaN; the values are never read as numbers
    std::fill(q16, q16 + d, int16_t{0});
    return;
  }
  // Planes and bytes in nested loops: no divisions per element.
  const int64_t plane_bytes = d / 4, chunks = plane_bytes / 16, n_blocks = blocks();
  for (int64_t k = 0; k < 4; ++k) {
    for (int64_t p = 0; p < plane_bytes; ++p) {
      q16[lookup_position(k, p, chunks, n_blocks)] = round16(q[k * plane_bytes + p] * s.inverse);
    }
  }
}

void score_codebook_rows(const CodebookRows& rows, const CodebookLevels16& levels, const CodebookQueries& queries,
                         float* scores, int64_t ld) {
  HWY_DYNAMIC_DISPATCH(ScoreCodebookImpl)(rows, levels, queries, scores, ld);
}

namespace scalar {
void score_codebook_rows(const CodebookRows& rows, const CodebookLevels16& levels, const CodebookQueries& queries,
                         float* scores, int64_t ld) {
  const uint8_t* const s1 = rows.s1;
  const uint8_t* const s2 = rows.s2;
  const int64_t row_stride = rows.row_stride, n_rows = rows.n_rows, d = rows.d, n_q = queries.n_q;
  const int16_t* const q16 = queries.q16;
  const float* const q_step = queries.q_step;
  const int64_t plane_bytes = d / 4;
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t j = 0; j < n_rows; ++j) {
      int32_t total = 0;
      for (int64_t e = 0; e < d; ++e) {
        const int64_t k = e / plane_bytes, p = e % plane_bytes;
        const int i1 = (s1[j * row_stride + p] >> (2 * k)) & 3;
        const int i2 = s2 != nullptr ? (s2[j * row_stride + p] >> (2 * k)) & 3 : 0;
        const int index = s2 != nullptr ? 4 * i1 + i2 : 4 * i1;
        total += static_cast<int32_t>(q16[r * d + codebook_lookup_position(e, d)]) * levels.value[index];
      }
      scores[r * ld + j] = (q_step[r] * levels.step) * static_cast<float>(total) + 0.0f;
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
#endif  // HWY_ONCE
