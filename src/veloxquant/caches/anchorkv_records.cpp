// Highway kernels for anchorkv_records.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/caches/anchorkv_records.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/caches/anchorkv_records.h"

#include "base/half.h"

#if HWY_ONCE
namespace veloxquant::scalar {

namespace {
constexpr uint32_t kNoResidual = 0xFFFFFFFFu;  // AnchorKvCache::kNoResidual
}

int64_t read_anchor_records(const uint32_t* records, int64_t n, int field, int32_t* anchor, float* coef, int32_t* at,
                            uint32_t* slot) {
  int64_t count = 0;
  for (int64_t j = 0; j < n; ++j) {
    const uint32_t* rec = records + 3 * j;
    anchor[j] = static_cast<int32_t>(rec[field] & 0xFFFF);
    coef[j] = base::f16_to_f32(static_cast<uint16_t>(rec[field] >> 16));
    if (rec[2] != kNoResidual) {
      at[count] = static_cast<int32_t>(j);
      slot[count++] = rec[2];
    }
  }
  return count;
}

void anchor_row_scores(const int32_t* anchor, const float* coef, int64_t n, const float* table, int64_t n_anchor,
                       int64_t n_q, float* scores, int64_t ld) {
  for (int64_t r = 0; r < n_q; ++r) {
    const float* t = table + r * n_anchor;
    for (int64_t j = 0; j < n; ++j) scores[r * ld + j] = coef[j] * t[anchor[j]];
  }
}

}  // namespace veloxquant::scalar
#endif

HWY_BEFORE_NAMESPACE();
namespace veloxquant::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

int64_t ReadAnchorRecordsImpl(const uint32_t* records, int64_t n, int field, int32_t* anchor, float* coef, int32_t* at,
                              uint32_t* slot) {
  const hn::ScalableTag<uint32_t> du;
  const hn::RebindToSigned<decltype(du)> di;
  const hn::RebindToFloat<decltype(du)> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const hn::Rebind<uint16_t, decltype(du)> d16;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(du));
  const auto none = hn::Set(du, 0xFFFFFFFFu);
  const auto low = hn::Set(du, 0xFFFFu);
  int64_t j = 0, count = 0;
  for (; j + lanes <= n; j += lanes) {
    hn::Vec<decltype(du)> k, v, s;
    hn::LoadInterleaved3(du, records + 3 * j, k, v, s);
    const auto f = field == 0 ? k : v;
    hn::StoreU(hn::BitCast(di, hn::And(f, low)), di, anchor + j);
    const auto half = hn::TruncateTo(d16, hn::ShiftRight<16>(f));  // the upper 16 bits
    hn::StoreU(hn::PromoteTo(df, hn::BitCast(dh, half)), df, coef + j);
    const auto has = hn::Ne(s, none);
    const auto rows = hn::Add(hn::Iota(di, 0), hn::Set(di, static_cast<int32_t>(j)));
    hn::CompressBlendedStore(rows, hn::RebindMask(di, has), di, at + count);
    count += static_cast<int64_t>(hn::CompressBlendedStore(s, has, du, slot + count));
  }
  if (j < n) {  // the last n % lanes rows as the reference reads them, their places offset by j
    const int64_t tail =
        scalar::read_anchor_records(records + 3 * j, n - j, field, anchor + j, coef + j, at + count, slot + count);
    for (int64_t i = count; i < count + tail; ++i) at[i] += static_cast<int32_t>(j);
    count += tail;
  }
  return count;
}

void AnchorRowScoresImpl(const int32_t* anchor, const float* coef, int64_t n, const float* table, int64_t n_anchor,
                         int64_t n_q, float* scores, int64_t ld) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t r = 0; r < n_q; ++r) {
    const float* t = table + r * n_anchor;
    float* s = scores + r * ld;
    int64_t j = 0;
    for (; j + lanes <= n; j += lanes) {
      const auto g = hn::GatherIndex(df, t, hn::LoadU(di, anchor + j));
      hn::StoreU(hn::Mul(hn::LoadU(df, coef + j), g), df, s + j);
    }
    for (; j < n; ++j) s[j] = coef[j] * t[anchor[j]];
  }
}

}  // namespace veloxquant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant {
HWY_EXPORT(ReadAnchorRecordsImpl);
HWY_EXPORT(AnchorRowScoresImpl);

int64_t read_anchor_records(const uint32_t* records, int64_t n, int field, int32_t* anchor, float* coef, int32_t* at,
                            uint32_t* slot) {
  return HWY_DYNAMIC_DISPATCH(ReadAnchorRecordsImpl)(records, n, field, anchor, coef, at, slot);
}

void anchor_row_scores(const int32_t* anchor, const float* coef, int64_t n, const float* table, int64_t n_anchor,
                       int64_t n_q, float* scores, int64_t ld) {
  HWY_DYNAMIC_DISPATCH(AnchorRowScoresImpl)(anchor, coef, n, table, n_anchor, n_q, scores, ld);
}

}  // namespace veloxquant
#endif
