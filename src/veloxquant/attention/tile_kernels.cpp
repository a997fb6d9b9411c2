// Highway kernels for tile_kernels.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/tile_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/tile_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// NQ queries against one row: each row vector is loaded once and feeds NQ accumulators.
template <int NQ>
void ScoreBlock(const float* q, int64_t q_stride, const float* rows, int64_t row_stride, int64_t n_rows, int64_t d,
                float* scores, int64_t ld) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t dv = d - d % lanes;
  for (int64_t j = 0; j < n_rows; ++j) {
    const float* row = rows + j * row_stride;
    decltype(hn::Zero(df)) acc[NQ];
    for (int r = 0; r < NQ; ++r) acc[r] = hn::Zero(df);
    for (int64_t e = 0; e < dv; e += lanes) {
      const auto x = hn::LoadU(df, row + e);
      for (int r = 0; r < NQ; ++r) acc[r] = hn::MulAdd(hn::LoadU(df, q + r * q_stride + e), x, acc[r]);
    }
    for (int r = 0; r < NQ; ++r) {
      float s = hn::GetLane(hn::SumOfLanes(df, acc[r]));
      for (int64_t e = dv; e < d; ++e) s += q[r * q_stride + e] * row[e];
      scores[r * ld + j] = s;
    }
  }
}

void ScoreRowsImpl(const float* q, int64_t q_stride, int64_t n_q, const float* rows, int64_t row_stride,
                   int64_t n_rows, int64_t d, float* scores, int64_t ld) {
  int64_t r = 0;
  for (; r + 4 <= n_q; r += 4) ScoreBlock<4>(q + r * q_stride, q_stride, rows, row_stride, n_rows, d, scores + r * ld, ld);
  switch (n_q - r) {
    case 3: ScoreBlock<3>(q + r * q_stride, q_stride, rows, row_stride, n_rows, d, scores + r * ld, ld); break;
    case 2: ScoreBlock<2>(q + r * q_stride, q_stride, rows, row_stride, n_rows, d, scores + r * ld, ld); break;
    case 1: ScoreBlock<1>(q + r * q_stride, q_stride, rows, row_stride, n_rows, d, scores + r * ld, ld); break;
    default: break;
  }
}

// NQ accumulator rows x 2 vectors of columns: each row's 2 vectors are loaded once per row j
// and feed NQ * 2 accumulators held in registers across all rows of the tile.
template <int NQ>
void AccumulateBlock(const float* w, int64_t ld, const float* rows, int64_t row_stride, int64_t n_rows, int64_t d,
                     float* acc, int64_t acc_stride) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  int64_t e = 0;
  for (; e + 2 * lanes <= d; e += 2 * lanes) {
    decltype(hn::Zero(df)) a0[NQ], a1[NQ];
    for (int r = 0; r < NQ; ++r) {
      a0[r] = hn::LoadU(df, acc + r * acc_stride + e);
      a1[r] = hn::LoadU(df, acc + r * acc_stride + e + lanes);
    }
    for (int64_t j = 0; j < n_rows; ++j) {
      const float* row = rows + j * row_stride + e;
      const auto x0 = hn::LoadU(df, row);
      const auto x1 = hn::LoadU(df, row + lanes);
      for (int r = 0; r < NQ; ++r) {
        const auto wj = hn::Set(df, w[r * ld + j]);
        a0[r] = hn::MulAdd(wj, x0, a0[r]);
        a1[r] = hn::MulAdd(wj, x1, a1[r]);
      }
    }
    for (int r = 0; r < NQ; ++r) {
      hn::StoreU(a0[r], df, acc + r * acc_stride + e);
      hn::StoreU(a1[r], df, acc + r * acc_stride + e + lanes);
    }
  }
  for (; e < d; ++e) {
    for (int r = 0; r < NQ; ++r) {
      float s = acc[r * acc_stride + e];
      for (int64_t j = 0; j < n_rows; ++j) s += w[r * ld + j] * rows[j * row_stride + e];
      acc[r * acc_stride + e] = s;
    }
  }
}

void AccumulateRowsImpl(const float* w, int64_t ld, int64_t n_q, const float* rows, int64_t row_stride,
                        int64_t n_rows, int64_t d, float* acc, int64_t acc_stride) {
  int64_t r = 0;
  for (; r + 4 <= n_q; r += 4) {
    AccumulateBlock<4>(w + r * ld, ld, rows, row_stride, n_rows, d, acc + r * acc_stride, acc_stride);
  }
  switch (n_q - r) {
    case 3: AccumulateBlock<3>(w + r * ld, ld, rows, row_stride, n_rows, d, acc + r * acc_stride, acc_stride); break;
    case 2: AccumulateBlock<2>(w + r * ld, ld, rows, row_stride, n_rows, d, acc + r * acc_stride, acc_stride); break;
    case 1: AccumulateBlock<1>(w + r * ld, ld, rows, row_stride, n_rows, d, acc + r * acc_stride, acc_stride); break;
    default: break;
  }
}

void AffineDecodeImpl(const uint8_t* codes, const float* scale, const float* min, int64_t group, int64_t n,
                      float* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(di)> d8;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  int64_t e = 0;
  // Whole vectors inside one group share its (scale, min).
  if (group % lanes == 0) {
    for (; e + lanes <= n; e += lanes) {
      const int64_t g = e / group;
      const auto c = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, codes + e)));
      hn::StoreU(hn::MulAdd(c, hn::Set(df, scale[g]), hn::Set(df, min[g])), df, out + e);
    }
  }
  for (; e < n; ++e) out[e] = static_cast<float>(codes[e]) * scale[e / group] + min[e / group];
}

void UnpackPlanesImpl(const uint8_t* bytes, int64_t plane_bytes, int bits, float* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(di)> d8;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int planes = 8 / bits;
  const auto mask = hn::Set(di, (1 << bits) - 1);
  int64_t p = 0;
  for (; p + lanes <= plane_bytes; p += lanes) {
    const auto v = hn::PromoteTo(di, hn::LoadU(d8, bytes + p));
    for (int k = 0; k < planes; ++k) {
      hn::StoreU(hn::ConvertTo(df, hn::And(hn::ShiftRightSame(v, k * bits), mask)), df, out + k * plane_bytes + p);
    }
  }
  for (; p < plane_bytes; ++p) {
    for (int k = 0; k < planes; ++k) out[k * plane_bytes + p] = static_cast<float>((bytes[p] >> (k * bits)) & ((1 << bits) - 1));
  }
}

// c[idx] for 32-bit lane indices < 2^bits: in-register table lookups while the codebook fits
// one or two vectors (every b <= 4 on AVX2), a gather beyond.
template <class DF, class VI>
HWY_INLINE hn::Vec<DF> LookupCentroids(DF df, const float* c, int entries, VI idx) {
  const hn::RebindToSigned<DF> di;
  const int lanes = static_cast<int>(hn::Lanes(df));
  if (entries <= lanes) {
    HWY_ALIGN float table[hn::MaxLanes(df)] = {};
    for (int i = 0; i < entries; ++i) table[i] = c[i];
    return hn::TableLookupLanes(hn::Load(df, table), hn::IndicesFromVec(df, idx));
  }
  if (entries <= 2 * lanes) {
    const auto lo = hn::LoadU(df, c);
    HWY_ALIGN float upper[hn::MaxLanes(df)] = {};
    for (int i = lanes; i < entries; ++i) upper[i - lanes] = c[i];
    const auto hi = hn::Load(df, upper);
    const auto low_idx = hn::And(idx, hn::Set(di, lanes - 1));
    const auto from_hi = hn::RebindMask(df, hn::Gt(idx, hn::Set(di, lanes - 1)));
    return hn::IfThenElse(from_hi, hn::TableLookupLanes(hi, hn::IndicesFromVec(df, low_idx)),
                          hn::TableLookupLanes(lo, hn::IndicesFromVec(df, low_idx)));
  }
  return hn::GatherIndex(df, c, idx);
}

void CentroidPlanesImpl(const uint8_t* s1, const uint8_t* s2, int64_t plane_bytes, int bits, const float* c1,
                        const float* c2, float* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(di)> d8;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int planes = 8 / bits, entries = 1 << bits, mask_bits = entries - 1;
  const auto mask = hn::Set(di, mask_bits);
  int64_t p = 0;
  for (; p + lanes <= plane_bytes; p += lanes) {
    const auto v1 = hn::PromoteTo(di, hn::LoadU(d8, s1 + p));
    if (s2) {
      const auto v2 = hn::PromoteTo(di, hn::LoadU(d8, s2 + p));
      for (int k = 0; k < planes; ++k) {
        const auto a = LookupCentroids(df, c1, entries, hn::And(hn::ShiftRightSame(v1, k * bits), mask));
        const auto b = LookupCentroids(df, c2, entries, hn::And(hn::ShiftRightSame(v2, k * bits), mask));
        hn::StoreU(hn::Add(a, b), df, out + k * plane_bytes + p);
      }
    } else {
      for (int k = 0; k < planes; ++k) {
        hn::StoreU(LookupCentroids(df, c1, entries, hn::And(hn::ShiftRightSame(v1, k * bits), mask)), df,
                   out + k * plane_bytes + p);
      }
    }
  }
  for (; p < plane_bytes; ++p) {
    for (int k = 0; k < planes; ++k) {
      float v = c1[(s1[p] >> (k * bits)) & mask_bits];
      if (s2) v += c2[(s2[p] >> (k * bits)) & mask_bits];
      out[k * plane_bytes + p] = v;
    }
  }
}

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(ScoreRowsImpl);
HWY_EXPORT(AccumulateRowsImpl);
HWY_EXPORT(AffineDecodeImpl);
HWY_EXPORT(UnpackPlanesImpl);
HWY_EXPORT(CentroidPlanesImpl);
HWY_EXPORT(TargetNameImpl);

void centroid_planes(const uint8_t* s1, const uint8_t* s2, int64_t plane_bytes, int bits, const float* c1,
                     const float* c2, float* out) {
  HWY_DYNAMIC_DISPATCH(CentroidPlanesImpl)(s1, s2, plane_bytes, bits, c1, c2, out);
}

void unpack_planes(const uint8_t* bytes, int64_t plane_bytes, int bits, float* out) {
  HWY_DYNAMIC_DISPATCH(UnpackPlanesImpl)(bytes, plane_bytes, bits, out);
}

void score_rows(const float* q, int64_t q_stride, int64_t n_q, const float* rows, int64_t row_stride,
                int64_t n_rows, int64_t d, float* scores, int64_t ld) {
  HWY_DYNAMIC_DISPATCH(ScoreRowsImpl)(q, q_stride, n_q, rows, row_stride, n_rows, d, scores, ld);
}

void accumulate_rows(const float* w, int64_t ld, int64_t n_q, const float* rows, int64_t row_stride,
                     int64_t n_rows, int64_t d, float* acc, int64_t acc_stride) {
  HWY_DYNAMIC_DISPATCH(AccumulateRowsImpl)(w, ld, n_q, rows, row_stride, n_rows, d, acc, acc_stride);
}

void affine_decode(const uint8_t* codes, const float* scale, const float* min, int64_t group, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(AffineDecodeImpl)(codes, scale, min, group, n, out);
}

const char* target_name() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

namespace scalar {
void score_rows(const float* q, int64_t q_stride, int64_t n_q, const float* rows, int64_t row_stride,
                int64_t n_rows, int64_t d, float* scores, int64_t ld) {
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t j = 0; j < n_rows; ++j) {
      float s = 0.0f;
      for (int64_t e = 0; e < d; ++e) s += q[r * q_stride + e] * rows[j * row_stride + e];
      scores[r * ld + j] = s;
    }
  }
}

void accumulate_rows(const float* w, int64_t ld, int64_t n_q, const float* rows, int64_t row_stride,
                     int64_t n_rows, int64_t d, float* acc, int64_t acc_stride) {
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t j = 0; j < n_rows; ++j) {
      for (int64_t e = 0; e < d; ++e) acc[r * acc_stride + e] += w[r * ld + j] * rows[j * row_stride + e];
    }
  }
}

void affine_decode(const uint8_t* codes, const float* scale, const float* min, int64_t group, int64_t n, float* out) {
  for (int64_t e = 0; e < n; ++e) out[e] = static_cast<float>(codes[e]) * scale[e / group] + min[e / group];
}

void unpack_planes(const uint8_t* bytes, int64_t plane_bytes, int bits, float* out) {
  for (int k = 0; k < 8 / bits; ++k) {
    for (int64_t p = 0; p < plane_bytes; ++p) out[k * plane_bytes + p] = static_cast<float>((bytes[p] >> (k * bits)) & ((1 << bits) - 1));
  }
}

void centroid_planes(const uint8_t* s1, const uint8_t* s2, int64_t plane_bytes, int bits, const float* c1,
                     const float* c2, float* out) {
  const int mask = (1 << bits) - 1;
  for (int k = 0; k < 8 / bits; ++k) {
    for (int64_t p = 0; p < plane_bytes; ++p) {
      float v = c1[(s1[p] >> (k * bits)) & mask];
      if (s2) v += c2[(s2[p] >> (k * bits)) & mask];
      out[k * plane_bytes + p] = v;
    }
  }
}
}  // namespace scalar
}  // namespace veloxquant::attention::kernels
#endif
