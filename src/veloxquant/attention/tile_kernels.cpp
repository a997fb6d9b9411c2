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

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(AffineDecodeImpl);
HWY_EXPORT(UnpackPlanesImpl);
HWY_EXPORT(CentroidPlanesImpl);
HWY_EXPORT(TargetNameImpl);

void centroid_planes(const uint8_t* s1, const uint8_t* s2, int64_t row_stride, int64_t n_rows, int64_t plane_bytes,
                     int bits, const float* c1, const float* c2, float* out) {
  HWY_DYNAMIC_DISPATCH(CentroidPlanesImpl)(s1, s2, row_stride, n_rows, plane_bytes, bits, c1, c2, out);
}

void unpack_planes(const uint8_t* bytes, int64_t plane_bytes, int bits, float* out) {
  HWY_DYNAMIC_DISPATCH(UnpackPlanesImpl)(bytes, plane_bytes, bits, out);
}

void affine_decode(const uint8_t* codes, const float* scale, const float* min, int64_t group, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(AffineDecodeImpl)(codes, scale, min, group, n, out);
}

const char* target_name() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

namespace scalar {
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
}  // namespace scalar
}  // namespace veloxquant::attention::kernels
#endif
