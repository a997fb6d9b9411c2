// Highway kernels for mask_split_queries.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/mask_split_queries.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/mask_split_queries.h"
#include "veloxquant/attention/integer_query_step.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

// Helpers shared by every target's copy of this file (foreach_target includes it once per target).
#ifndef VQ_MASK_SPLIT_QUERIES_HELPERS
#define VQ_MASK_SPLIT_QUERIES_HELPERS
namespace veloxquant::attention::kernels {
namespace {
// Natural index i of a plane to its code-order position (NarrowPlane::position).
inline int64_t plane_position(const SplitPlane& p, int64_t i) { return i % p.per_byte * p.padded + i / p.per_byte; }

// fold_queries_i16's integers leave through a saturating demotion; the values are within +-limit,
// so this only matters for a NaN step (every score NaN anyway), kept alike all the same.
inline int16_t saturate16(int32_t v) { return static_cast<int16_t>(std::clamp<int32_t>(v, -32768, 32767)); }
}  // namespace
}  // namespace veloxquant::attention::kernels
#endif  // VQ_MASK_SPLIT_QUERIES_HELPERS

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Each query's plane values gathered from its natural row in the plane's padded code order
// (padding lanes zero), then rounded as FoldQueriesImpl rounds a padded plane with unit scales.
// idx/valid: the plane's dim source channels and lane flags (-1 valid, 0 padding); padded: dim
// floats of scratch.
void gather_round(const float* xr, const int32_t* idx, const int32_t* valid, const SplitPlane& p, float* padded,
                  int16_t* q16, float* step) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<int16_t, decltype(di)> d16;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  // dim is whole chunks of 16 bytes times 8 / bits codes: a multiple of 16 lanes' worth below
  // 512-bit vectors; any remainder goes the scalar way.
  const int64_t whole = p.dim / lanes * lanes;
  auto vmax = hn::Zero(df), total = hn::Zero(df);
  for (int64_t e = 0; e < whole; e += lanes) {
    const auto keep = hn::RebindMask(df, hn::MaskFromVec(hn::LoadU(di, valid + e)));
    const auto v = hn::IfThenElseZero(keep, hn::GatherIndex(df, xr, hn::LoadU(di, idx + e)));
    hn::StoreU(v, df, padded + e);
    vmax = hn::Max(vmax, hn::Abs(v));
    total = hn::Add(total, v);
  }
  float max_abs = whole > 0 ? hn::GetLane(hn::MaxOfLanes(df, vmax)) : 0.0f;
  float sum = whole > 0 ? hn::GetLane(hn::SumOfLanes(df, total)) : 0.0f;
  for (int64_t e = whole; e < p.dim; ++e) {
    padded[e] = valid[e] != 0 ? xr[idx[e]] : 0.0f;
    max_abs = std::max(max_abs, std::fabs(padded[e]));
    sum += padded[e];
  }
  // As FoldQueriesImpl: the sum is non-finite exactly when a value is (Max alone drops a NaN).
  const QueryStep s = query_step(std::isfinite(sum) ? max_abs : std::numeric_limits<float>::quiet_NaN(), p.limit);
  *step = s.step;
  // Round half to even by the magic-number addition (exact for |y| <= limit < 2^22), demoted with
  // saturation, as FoldQueriesImpl.
  const auto inverse = hn::Set(df, s.inverse);
  const auto magic = hn::Set(df, 12582912.0f);
  const auto magic_bits = hn::Set(di, 0x4B400000);
  for (int64_t e = 0; e < whole; e += lanes) {
    const auto y = hn::Mul(hn::LoadU(df, padded + e), inverse);
    const auto rounded = hn::Sub(hn::BitCast(di, hn::Add(y, magic)), magic_bits);
    hn::StoreU(hn::DemoteTo(d16, rounded), d16, q16 + e);
  }
  for (int64_t e = whole; e < p.dim; ++e) q16[e] = saturate16(static_cast<int32_t>(std::lrintf(padded[e] * s.inverse)));
}

void SplitQueriesImpl(const float* x, int64_t n_q, int64_t d, const uint32_t* mask, const SplitPlane* planes,
                      int16_t* q16_0, float* step0, int16_t* q16_1, float* step1,
                      const detail::SplitQueryScratch& scratch) {
  int32_t* ints = scratch.ints;
  float* floats = scratch.floats;
  const hn::ScalableTag<int32_t> di;
  const hn::RebindToUnsigned<decltype(di)> du;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(di));
  // The block's channel lists, ascending: plane 0 the set bits, plane 1 the others (whole
  // vectors while a vector's lanes lie inside one mask word).
  int32_t* channels[2] = {ints, ints + d + lanes};  // CompressStore may write a vector past its count
  int64_t count[2] = {0, 0};
  const int64_t whole = lanes <= 32 ? d / lanes * lanes : 0;
  const auto lane_bits = hn::Shl(hn::Set(du, 1u), hn::BitCast(du, hn::Iota(di, 0)));
  for (int64_t c = 0; c < whole; c += lanes) {
    const auto ids = hn::Iota(di, static_cast<int32_t>(c));
    const auto high = hn::RebindMask(di, hn::TestBit(hn::Set(du, mask[c / 32] >> (c % 32)), lane_bits));
    count[0] += static_cast<int64_t>(hn::CompressStore(ids, high, di, channels[0] + count[0]));
    count[1] += static_cast<int64_t>(hn::CompressStore(ids, hn::Not(high), di, channels[1] + count[1]));
  }
  for (int64_t c = whole; c < d; ++c) {
    const int k = ((mask[c / 32] >> (c % 32)) & 1u) ? 0 : 1;
    channels[k][count[k]++] = static_cast<int32_t>(c);
  }
  // Each plane's source channel per padded position (natural index i = p * per_byte + k at
  // position k * padded + p; a padding lane reads channel 0 and is zeroed).
  int32_t* idx[2];
  int32_t* valid[2];
  int32_t* at = ints + 2 * (d + lanes);
  for (int k = 0; k < 2; ++k) {
    const SplitPlane& p = planes[k];
    idx[k] = at;
    valid[k] = at + p.dim;
    at += 2 * p.dim;
    for (int64_t kk = 0; kk < p.per_byte; ++kk) {
      for (int64_t b = 0; b < p.padded; ++b) {
        const int64_t i = b * p.per_byte + kk, e = kk * p.padded + b;
        const bool real = i < count[k];
        idx[k][e] = real ? channels[k][i] : 0;
        valid[k][e] = real ? -1 : 0;
      }
    }
  }
  int16_t* out[2] = {q16_0, q16_1};
  float* steps[2] = {step0, step1};
  for (int64_t r = 0; r < n_q; ++r) {
    for (int k = 0; k < 2; ++k) {
      if (planes[k].dim == 0) continue;
      gather_round(x + r * d, idx[k], valid[k], planes[k], floats, out[k] + r * planes[k].dim, steps[k] + r);
    }
  }
}

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(SplitQueriesImpl);

void split_queries_i16(const float* x, int64_t n_q, int64_t d, const uint32_t* mask, const SplitPlane* planes,
                       int16_t* q16_0, float* step0, int16_t* q16_1, float* step1) {
  // Grow-only per-thread scratch: both planes' channel lists (each with a vector's slack), their
  // source channels and lane flags per padded position; one padded plane of floats.
  thread_local std::vector<int32_t> ints;
  thread_local std::vector<float> floats;
  const auto need_ints = static_cast<std::size_t>(2 * (d + 64) + 2 * (planes[0].dim + planes[1].dim));
  const auto need_floats = static_cast<std::size_t>(std::max(planes[0].dim, planes[1].dim));
  if (ints.size() < need_ints) ints.resize(need_ints);
  if (floats.size() < need_floats) floats.resize(need_floats);
  HWY_DYNAMIC_DISPATCH(SplitQueriesImpl)
  (x, n_q, d, mask, planes, q16_0, step0, q16_1, step1, detail::SplitQueryScratch{ints.data(), floats.data()});
}

namespace scalar {

void split_queries_i16(const float* x, int64_t n_q, int64_t d, const uint32_t* mask, const SplitPlane* planes,
                       int16_t* q16_0, float* step0, int16_t* q16_1, float* step1) {
  std::vector<float> plane_values[2];
  int16_t* out[2] = {q16_0, q16_1};
  float* steps[2] = {step0, step1};
  for (int64_t r = 0; r < n_q; ++r) {
    plane_values[0].clear();
    plane_values[1].clear();
    for (int64_t c = 0; c < d; ++c) plane_values[((mask[c / 32] >> (c % 32)) & 1u) ? 0 : 1].push_back(x[r * d + c]);
    for (int k = 0; k < 2; ++k) {
      const SplitPlane& p = planes[k];
      if (p.dim == 0) continue;
      const std::vector<float>& v = plane_values[k];
      const QueryStep s = vector_step(v.data(), static_cast<int64_t>(v.size()), p.limit);
      steps[k][r] = s.step;
      int16_t* q = out[k] + r * p.dim;
      std::fill(q, q + p.dim, int16_t{0});
      for (std::size_t i = 0; i < v.size(); ++i) {
        q[plane_position(p, static_cast<int64_t>(i))] = saturate16(static_cast<int32_t>(std::lrintf(v[i] * s.inverse)));
      }
    }
  }
}

}  // namespace scalar
}  // namespace veloxquant::attention::kernels
#endif  // HWY_ONCE
