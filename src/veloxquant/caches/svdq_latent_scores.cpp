// Highway per-target compilation of svdq_latent_scores.h: the fused kernel exists for AVX-512
// (AVX3 and above); every other target runs the two-pass form.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/caches/svdq_latent_scores.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/caches/svdq_latent_scores.h"

#include <algorithm>

#include "lm/kernels/attention_tiles.h"
#include "veloxquant/attention/sum_quads512-inl.h"
#include "veloxquant/caches/svdq_latent_decode.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::HWY_NAMESPACE {

// The two-pass form: the reference the fused kernel equals, and the path of every case it does
// not take.
HWY_INLINE void score_two_pass(const LatentCodeRows& r, const float* q, int64_t q_stride, int64_t n_q, float* scores,
                               int64_t ld, float* scratch) {
  const int64_t coded = r.layout->coded;
  decode_latent_rows(*r.layout, r.first_row, r.row_stride, r.n_rows, r.scale, r.min, scratch);
  lm::kernels::tiles::score_rows(q, q_stride, n_q, scratch, coded, r.n_rows, coded, scores, ld);
}

// Set per target pass (this file is compiled once per target).
#undef VQ_SVDQ_FUSED
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define VQ_SVDQ_FUSED 1

constexpr int kMaxGroups = 8;  // the schedule has 8 groups

// Where lane l of a two-row vector finds its code: dword index into the pair's loaded bytes (row
// 2p in dwords 0.., row 2p + 1 from `upper`), right shift, mask.
struct LaneCodes {
  __m512i index[kMaxGroups], shift[kMaxGroups], mask[kMaxGroups];
  __m512 scale[kMaxGroups], min[kMaxGroups];  // the group's 8 floats in both halves
};

// How a pair of rows is read: one masked load over both when they lie within 64 bytes from a
// dword-aligned stride, else one 32-byte masked load per row into the two halves.
struct PairLoad {
  bool single;
  __mmask64 both;  // single: the bytes of row 2p, the gap, row 2p + 1
  __mmask32 one;   // else: one row's bytes
  int32_t upper;   // dword of row 2p + 1's first byte
};

HWY_INLINE __m512i load_pair(const PairLoad& how, const uint8_t* row0, int64_t row_stride) {
  if (how.single) return _mm512_maskz_loadu_epi8(how.both, row0);
  const __m256i lo = _mm256_maskz_loadu_epi8(how.one, row0);
  const __m256i hi = _mm256_maskz_loadu_epi8(how.one, row0 + row_stride);
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// Codes of group g for both rows of a pair, widened and decoded: code * scale + min (one FMA, as
// svdq_latent_decode rounds it).
HWY_INLINE __m512 decode_pair(const LaneCodes& lanes, int g, __m512i bytes) {
  __m512i c = _mm512_permutexvar_epi32(lanes.index[g], bytes);
  c = _mm512_and_si512(_mm512_srlv_epi32(c, lanes.shift[g]), lanes.mask[g]);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(c), lanes.scale[g], lanes.min[g]);
}

// Whole passes of 8 rows for NQ queries: acc[r][p] holds rows 2p (lanes 0-7) and 2p + 1 (lanes
// 8-15), each lane the FMA chain over the groups that score_rows runs over the row's chunks; then
// score_rows' tree per 128-bit block (sum_quads512), the two blocks of a row added, rows put in
// order.
template <int NQ>
HWY_INLINE void score_passes(const LaneCodes& lanes, int n_groups, const PairLoad& how, const uint8_t* first_row,
                             int64_t row_stride, int64_t whole, const float* q, int64_t q_stride, float* scores,
                             int64_t ld) {
  __m512 qv[NQ][kMaxGroups];
  for (int r = 0; r < NQ; ++r) {
    for (int g = 0; g < n_groups; ++g) qv[r][g] = _mm512_broadcast_f32x8(_mm256_loadu_ps(q + r * q_stride + 8 * g));
  }
  const __m512i order = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 0, 8, 1, 9, 2, 10, 3, 11);
  for (int64_t j = 0; j < whole; j += 8) {
    const uint8_t* rows = first_row + j * row_stride;
    __m512i bytes[4];
    for (int p = 0; p < 4; ++p) bytes[p] = load_pair(how, rows + 2 * p * row_stride, row_stride);
    __m512 acc[NQ][4];
    for (int r = 0; r < NQ; ++r) {
      for (int p = 0; p < 4; ++p) acc[r][p] = _mm512_setzero_ps();
    }
    for (int g = 0; g < n_groups; ++g) {
      for (int p = 0; p < 4; ++p) {
        const __m512 x = decode_pair(lanes, g, bytes[p]);
        for (int r = 0; r < NQ; ++r) acc[r][p] = _mm512_fmadd_ps(qv[r][g], x, acc[r][p]);
      }
    }
    for (int r = 0; r < NQ; ++r) {
      // Block 0 / 1: rows 0, 2, 4, 6's halves; blocks 2 / 3: rows 1, 3, 5, 7's.
      const __m512 s = attention::kernels::HWY_NAMESPACE::sum_quads512(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
      const __m512 t = _mm512_add_ps(s, _mm512_shuffle_f32x4(s, s, _MM_SHUFFLE(2, 3, 0, 1)));
      _mm256_storeu_ps(scores + r * ld + j, _mm512_castps512_ps256(_mm512_permutexvar_ps(order, t)));
    }
  }
}

bool FusesImpl(const SvdqLayout& layout) {
  if (layout.groups.empty() || layout.groups.size() > kMaxGroups || layout.row_bytes > 32) return false;
  for (std::size_t g = 0; g < layout.groups.size(); ++g) {
    const SvdqGroup& gr = layout.groups[g];
    const bool width_ok = gr.bits == 1 || gr.bits == 2 || gr.bits == 4 || gr.bits == 8;
    if (gr.channels != 8 || gr.first != static_cast<int64_t>(8 * g) || !width_ok) return false;
  }
  return true;
}
#else
bool FusesImpl(const SvdqLayout&) { return false; }
#endif

void ScoreLatentCodesImpl(const LatentCodeRows& rows, const float* q, int64_t q_stride, int64_t n_q, float* scores,
                          int64_t ld, float* scratch) {
#ifdef VQ_SVDQ_FUSED
  const SvdqLayout& layout = *rows.layout;
  const uint8_t* first_row = rows.first_row;
  const int64_t row_stride = rows.row_stride, n_rows = rows.n_rows;
  const float *scale = rows.scale, *min = rows.min;
  const int64_t whole = n_rows - n_rows % 8;
  if (whole > 0 && n_q >= 1 && n_q <= 3 && FusesImpl(layout)) {
    PairLoad how{};
    how.single = row_stride % 4 == 0 && row_stride + layout.row_bytes <= 64;
    how.upper = how.single ? static_cast<int32_t>(row_stride / 4) : 8;
    if (how.single) {
      const int64_t span = row_stride + layout.row_bytes;
      how.both = span >= 64 ? ~__mmask64{0} : ((__mmask64{1} << span) - 1);
    } else {
      how.one = layout.row_bytes >= 32 ? ~__mmask32{0} : ((__mmask32{1} << layout.row_bytes) - 1);
    }
    LaneCodes lanes;
    const int n_groups = static_cast<int>(layout.groups.size());
    for (int g = 0; g < n_groups; ++g) {
      const SvdqGroup& gr = layout.groups[static_cast<std::size_t>(g)];
      alignas(64) int32_t index[16], shift[16];
      for (int l = 0; l < 16; ++l) {
        const int64_t bit = gr.byte_offset * 8 + (l % 8) * gr.bits;
        index[l] = static_cast<int32_t>(bit / 32) + (l >= 8 ? how.upper : 0);
        shift[l] = static_cast<int32_t>(bit % 32);
      }
      lanes.index[g] = _mm512_load_si512(index);
      lanes.shift[g] = _mm512_load_si512(shift);
      lanes.mask[g] = _mm512_set1_epi32((1 << gr.bits) - 1);
      lanes.scale[g] = _mm512_broadcast_f32x8(_mm256_loadu_ps(scale + gr.first));
      lanes.min[g] = _mm512_broadcast_f32x8(_mm256_loadu_ps(min + gr.first));
    }
    switch (n_q) {
      case 1:
        score_passes<1>(lanes, n_groups, how, first_row, row_stride, whole, q, q_stride, scores, ld);
        break;
      case 2:
        score_passes<2>(lanes, n_groups, how, first_row, row_stride, whole, q, q_stride, scores, ld);
        break;
      default:
        score_passes<3>(lanes, n_groups, how, first_row, row_stride, whole, q, q_stride, scores, ld);
        break;
    }
    // The last n_rows % 8 rows: score_rows takes them one by one, so on their own they score as
    // they would at the end of the whole tile.
    if (whole < n_rows) {
      LatentCodeRows rest = rows;
      rest.first_row = first_row + whole * row_stride;
      rest.n_rows = n_rows - whole;
      score_two_pass(rest, q, q_stride, n_q, scores + whole, ld, scratch);
    }
    return;
  }
#endif
  score_two_pass(rows, q, q_stride, n_q, scores, ld, scratch);
}

}  // namespace veloxquant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant {
HWY_EXPORT(FusesImpl);
HWY_EXPORT(ScoreLatentCodesImpl);

bool latent_codes_fuse(const SvdqLayout& layout) { return HWY_DYNAMIC_DISPATCH(FusesImpl)(layout); }

void score_latent_codes(const LatentCodeRows& rows, const float* q, int64_t q_stride, int64_t n_q, float* scores,
                        int64_t ld, float* scratch) {
  HWY_DYNAMIC_DISPATCH(ScoreLatentCodesImpl)(rows, q, q_stride, n_q, scores, ld, scratch);
}

}  // namespace veloxquant
#endif
