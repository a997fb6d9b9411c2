// Highway kernels for product_vq_lut.h, compiled once per target and dispatched at run time.
// Built with -ffp-contract=off (src/veloxquant/CMakeLists.txt): a table entry is a multiply then
// an add per coordinate, rounded apart, as product_vq.cpp's baseline loop.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/caches/product_vq_lut.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/caches/product_vq_lut.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::pvq::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void LutFromColumnsImpl(const float* transposed, int64_t entries, int sub, const float* q, float* out) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t k = 0;
  for (; k + lanes <= entries; k += lanes) {
    auto s = hn::Zero(d);
    for (int e = 0; e < sub; ++e) s = hn::Add(s, hn::Mul(hn::Set(d, q[e]), hn::LoadU(d, transposed + e * entries + k)));
    hn::StoreU(s, d, out + k);
  }
  for (; k < entries; ++k) {
    float s = 0.0f;
    for (int e = 0; e < sub; ++e) s += q[e] * transposed[e * entries + k];
    out[k] = s;
  }
}

void ScoreLutRows4x8Impl(const uint8_t* codes, int64_t n_rows, const float* luts, int64_t lut_stride, int64_t n_q,
                         float* scores, int64_t ld) {
  int64_t j = 0;
#if HWY_TARGET != HWY_SCALAR
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto byte = hn::Set(di, 0xff);
  for (; j + lanes <= n_rows; j += lanes) {
    const auto words = hn::LoadU(di, reinterpret_cast<const int32_t*>(codes + 4 * j));
    // Table offsets t * 256 + code_t, code t in byte t of the row's word (little-endian).
    const auto i0 = hn::And(words, byte);
    const auto i1 = hn::Add(hn::And(hn::ShiftRight<8>(words), byte), hn::Set(di, 256));
    const auto i2 = hn::Add(hn::And(hn::ShiftRight<16>(words), byte), hn::Set(di, 512));
    const auto i3 = hn::Add(hn::And(hn::ShiftRight<24>(words), byte), hn::Set(di, 768));
    for (int64_t r = 0; r < n_q; ++r) {
      const float* lut = luts + r * lut_stride;
      auto s = hn::Add(hn::Zero(d), hn::GatherIndex(d, lut, i0));
      s = hn::Add(s, hn::GatherIndex(d, lut, i1));
      s = hn::Add(s, hn::GatherIndex(d, lut, i2));
      s = hn::Add(s, hn::GatherIndex(d, lut, i3));
      hn::StoreU(s, d, scores + r * ld + j);
    }
  }
#endif
  if (j < n_rows) scalar::score_lut_rows_4x8(codes + 4 * j, n_rows - j, luts, lut_stride, n_q, scores + j, ld);
}

}  // namespace veloxquant::pvq::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::pvq {
HWY_EXPORT(LutFromColumnsImpl);
HWY_EXPORT(ScoreLutRows4x8Impl);

void lut_from_columns(const float* transposed, int64_t entries, int sub, const float* q, float* out) {
  HWY_DYNAMIC_DISPATCH(LutFromColumnsImpl)(transposed, entries, sub, q, out);
}

void score_lut_rows_4x8(const uint8_t* codes, int64_t n_rows, const float* luts, int64_t lut_stride, int64_t n_q,
                        float* scores, int64_t ld) {
  HWY_DYNAMIC_DISPATCH(ScoreLutRows4x8Impl)(codes, n_rows, luts, lut_stride, n_q, scores, ld);
}

namespace scalar {
void lut_from_columns(const float* transposed, int64_t entries, int sub, const float* q, float* out) {
  for (int64_t k = 0; k < entries; ++k) {
    float s = 0.0f;
    for (int e = 0; e < sub; ++e) s += q[e] * transposed[e * entries + k];
    out[k] = s;
  }
}

void score_lut_rows_4x8(const uint8_t* codes, int64_t n_rows, const float* luts, int64_t lut_stride, int64_t n_q,
                        float* scores, int64_t ld) {
  for (int64_t j = 0; j < n_rows; ++j) {
    const uint8_t* c = codes + 4 * j;
    for (int64_t r = 0; r < n_q; ++r) {
      const float* lut = luts + r * lut_stride;
      float s = 0.0f;
      for (int t = 0; t < 4; ++t) s += lut[t * 256 + c[t]];
      scores[r * ld + j] = s;
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::pvq
#endif  // HWY_ONCE
