// Highway kernels for tile_kernels.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/tile_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/tile_kernels.h"

#include <algorithm>
#include <limits>

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
  int64_t j = 0;
  // Two rows per pass: each query vector loaded once feeds both rows' accumulators.
  for (; j + 2 <= n_rows; j += 2) {
    const float* row0 = rows + j * row_stride;
    const float* row1 = row0 + row_stride;
    decltype(hn::Zero(df)) acc0[NQ], acc1[NQ];
    for (int r = 0; r < NQ; ++r) acc0[r] = acc1[r] = hn::Zero(df);
    for (int64_t e = 0; e < dv; e += lanes) {
      const auto x0 = hn::LoadU(df, row0 + e);
      const auto x1 = hn::LoadU(df, row1 + e);
      for (int r = 0; r < NQ; ++r) {
        const auto qv = hn::LoadU(df, q + r * q_stride + e);
        acc0[r] = hn::MulAdd(qv, x0, acc0[r]);
        acc1[r] = hn::MulAdd(qv, x1, acc1[r]);
      }
    }
    for (int r = 0; r < NQ; ++r) {
      float s0 = hn::GetLane(hn::SumOfLanes(df, acc0[r]));
      float s1 = hn::GetLane(hn::SumOfLanes(df, acc1[r]));
      for (int64_t e = dv; e < d; ++e) {
        s0 += q[r * q_stride + e] * row0[e];
        s1 += q[r * q_stride + e] * row1[e];
      }
      scores[r * ld + j] = s0;
      scores[r * ld + j + 1] = s1;
    }
  }
  for (; j < n_rows; ++j) {
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
  // Blocks of 4 queries (8 accumulators for the two rows of a pass: within AVX2's 16 registers).
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
  for (; e + lanes <= d; e += lanes) {
    decltype(hn::Zero(df)) a0[NQ];
    for (int r = 0; r < NQ; ++r) a0[r] = hn::LoadU(df, acc + r * acc_stride + e);
    for (int64_t j = 0; j < n_rows; ++j) {
      const auto x0 = hn::LoadU(df, rows + j * row_stride + e);
      for (int r = 0; r < NQ; ++r) a0[r] = hn::MulAdd(hn::Set(df, w[r * ld + j]), x0, a0[r]);
    }
    for (int r = 0; r < NQ; ++r) hn::StoreU(a0[r], df, acc + r * acc_stride + e);
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

// A codebook of 2^bits centroids held in registers for lookups by 32-bit lane indices: one
// vector while it fits (b <= 3 on AVX2), two with a select (b = 4), a gather beyond.
template <class DF>
struct CentroidTable {
  using V = hn::Vec<DF>;
  V lo, hi;
  const float* c;
  int entries, lanes;
  CentroidTable(DF df, const float* centroids, int n) : c(centroids), entries(n), lanes(static_cast<int>(hn::Lanes(df))) {
    HWY_ALIGN float t0[hn::MaxLanes(df)] = {};
    HWY_ALIGN float t1[hn::MaxLanes(df)] = {};
    for (int i = 0; i < n && i < lanes; ++i) t0[i] = centroids[i];
    for (int i = lanes; i < n && i < 2 * lanes; ++i) t1[i - lanes] = centroids[i];
    lo = hn::Load(df, t0);
    hi = hn::Load(df, t1);
  }
  template <class VI>
  HWY_INLINE V lookup(DF df, VI idx) const {
    const hn::RebindToSigned<DF> di;
    if (entries <= lanes) return hn::TableLookupLanes(lo, hn::IndicesFromVec(df, idx));
    if (entries <= 2 * lanes) {
      const auto low_idx = hn::IndicesFromVec(df, hn::And(idx, hn::Set(di, lanes - 1)));
      const auto from_hi = hn::RebindMask(df, hn::Gt(idx, hn::Set(di, lanes - 1)));
      return hn::IfThenElse(from_hi, hn::TableLookupLanes(hi, low_idx), hn::TableLookupLanes(lo, low_idx));
    }
    return hn::GatherIndex(df, c, idx);
  }
};

void CentroidPlanesImpl(const uint8_t* s1, const uint8_t* s2, int64_t row_stride, int64_t n_rows, int64_t plane_bytes,
                        int bits, const float* c1, const float* c2, float* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(di)> d8;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int planes = 8 / bits, entries = 1 << bits, mask_bits = entries - 1;
  const auto mask = hn::Set(di, mask_bits);
  const CentroidTable<decltype(df)> t1(df, c1, entries);
  const CentroidTable<decltype(df)> t2(df, s2 ? c2 : c1, entries);
  const int64_t row_out = plane_bytes * planes;
  for (int64_t j = 0; j < n_rows; ++j, s1 += row_stride, s2 = s2 ? s2 + row_stride : nullptr, out += row_out) {
    int64_t p = 0;
    for (; p + lanes <= plane_bytes; p += lanes) {
      const auto v1 = hn::PromoteTo(di, hn::LoadU(d8, s1 + p));
      if (s2) {
        const auto v2 = hn::PromoteTo(di, hn::LoadU(d8, s2 + p));
        for (int k = 0; k < planes; ++k) {
          const auto a = t1.lookup(df, hn::And(hn::ShiftRightSame(v1, k * bits), mask));
          const auto b = t2.lookup(df, hn::And(hn::ShiftRightSame(v2, k * bits), mask));
          hn::StoreU(hn::Add(a, b), df, out + k * plane_bytes + p);
        }
      } else {
        for (int k = 0; k < planes; ++k) {
          hn::StoreU(t1.lookup(df, hn::And(hn::ShiftRightSame(v1, k * bits), mask)), df, out + k * plane_bytes + p);
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
}

float ScaleAndMaxImpl(float* s, int64_t n, float scale) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto vs = hn::Set(df, scale);
  auto vmax = hn::Set(df, -std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto x = hn::Mul(hn::LoadU(df, s + i), vs);
    hn::StoreU(x, df, s + i);
    vmax = hn::Max(vmax, x);
  }
  float m = hn::GetLane(hn::MaxOfLanes(df, vmax));
  for (; i < n; ++i) {
    s[i] *= scale;
    m = std::max(m, s[i]);
  }
  return m;
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
HWY_EXPORT(ScaleAndMaxImpl);
HWY_EXPORT(TargetNameImpl);

float scale_and_max(float* s, int64_t n, float scale) { return HWY_DYNAMIC_DISPATCH(ScaleAndMaxImpl)(s, n, scale); }

void centroid_planes(const uint8_t* s1, const uint8_t* s2, int64_t row_stride, int64_t n_rows, int64_t plane_bytes,
                     int bits, const float* c1, const float* c2, float* out) {
  HWY_DYNAMIC_DISPATCH(CentroidPlanesImpl)(s1, s2, row_stride, n_rows, plane_bytes, bits, c1, c2, out);
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

void centroid_planes(const uint8_t* s1, const uint8_t* s2, int64_t row_stride, int64_t n_rows, int64_t plane_bytes,
                     int bits, const float* c1, const float* c2, float* out) {
  const int mask = (1 << bits) - 1, planes = 8 / bits;
  for (int64_t j = 0; j < n_rows; ++j) {
    const uint8_t* r1 = s1 + j * row_stride;
    const uint8_t* r2 = s2 ? s2 + j * row_stride : nullptr;
    float* o = out + j * plane_bytes * planes;
    for (int k = 0; k < planes; ++k) {
      for (int64_t p = 0; p < plane_bytes; ++p) {
        float v = c1[(r1[p] >> (k * bits)) & mask];
        if (r2) v += c2[(r2[p] >> (k * bits)) & mask];
        o[k * plane_bytes + p] = v;
      }
    }
  }
}

float scale_and_max(float* s, int64_t n, float scale) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, s[i] *= scale);
  return m;
}
}  // namespace scalar
}  // namespace veloxquant::attention::kernels
#endif
