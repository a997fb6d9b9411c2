// Highway kernel for nearest_codeword.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/quant/nearest_codeword.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/quant/nearest_codeword.h"

#include <cmath>
#include <limits>

HWY_BEFORE_NAMESPACE();
namespace veloxquant::pvq::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
// The two distances, as the scalar references form them, term by term in coordinate order.
// Product: ||c||^2 + sum_e (-2 x_e) c_e (the norms passed in); squared: sum_e (x_e - c_e)^2 from 0.
enum class Distance { kProduct, kSquared };

// The distances of a vector's width of entries, and each lane's running minimum and its index.
// SUB > 0: the sub-vector width known at compile time (VecInfer's 4 and 8, NSNQuant's 8).
template <Distance DIST, int SUB>
HWY_INLINE int64_t nearest_lanes(const float* transposed, const float* norms, int64_t entries, int sub_runtime,
                                 const float* x) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  constexpr int kMaxSub = 16;
  const int sub = SUB > 0 ? SUB : sub_runtime;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<decltype(d)> xe[SUB > 0 ? SUB : kMaxSub];
  for (int e = 0; e < sub; ++e) xe[e] = hn::Set(d, DIST == Distance::kProduct ? -2.0f * x[e] : x[e]);
  const auto distance = [&](int64_t c) {
    if constexpr (DIST == Distance::kProduct) {
      auto dist = hn::LoadU(d, norms + c);
      for (int e = 0; e < sub; ++e) dist = hn::Add(dist, hn::Mul(xe[e], hn::LoadU(d, transposed + e * entries + c)));
      return dist;
    } else {
      auto dist = hn::Zero(d);
      for (int e = 0; e < sub; ++e) {
        const auto diff = hn::Sub(xe[e], hn::LoadU(d, transposed + e * entries + c));
        dist = hn::Add(dist, hn::Mul(diff, diff));
      }
      return dist;
    }
  };
  auto best = hn::Set(d, std::numeric_limits<float>::infinity());
  auto best_index = hn::Zero(di);
  auto index = hn::Iota(di, 0);
  const auto step = hn::Set(di, static_cast<int32_t>(lanes));
  const int64_t whole = entries - entries % lanes;
  for (int64_t c = 0; c < whole; c += lanes) {
    const auto dist = distance(c);
    const auto closer = hn::Lt(dist, best);
    best = hn::IfThenElse(closer, dist, best);
    best_index = hn::IfThenElse(hn::RebindMask(di, closer), index, best_index);
    index = hn::Add(index, step);
  }
  // The lanes merged: the smallest distance, then the lowest index holding it.
  const float best_d = hn::GetLane(hn::MinOfLanes(d, best));
  const auto at_min = hn::RebindMask(di, hn::Eq(best, hn::Set(d, best_d)));
  const auto candidates = hn::IfThenElse(at_min, best_index, hn::Set(di, std::numeric_limits<int32_t>::max()));
  int64_t result = hn::GetLane(hn::MinOfLanes(di, candidates));
  // (No lane below infinity: index 0, as both references return then.)
  if (whole == 0 || result == std::numeric_limits<int32_t>::max()) result = 0;
  float result_d = whole == 0 ? std::numeric_limits<float>::infinity() : best_d;
  for (int64_t c = whole; c < entries; ++c) {  // the last entries, in order
    float dist;
    if constexpr (DIST == Distance::kProduct) {
      dist = norms[c];
      for (int e = 0; e < sub; ++e) dist = dist + (-2.0f * x[e]) * transposed[e * entries + c];
    } else {
      dist = 0.0f;
      for (int e = 0; e < sub; ++e) {
        const float diff = x[e] - transposed[e * entries + c];
        dist = dist + diff * diff;
      }
    }
    // The product search takes entry 0 whatever its distance; the squared one starts from
    // infinity (NsnCodebook's rule). They differ only where a distance is NaN.
    if ((DIST == Distance::kProduct && c == 0) || dist < result_d) {
      result_d = dist;
      result = c;
    }
  }
  return result;
}

#if HWY_TARGET <= HWY_AVX2  // targets with FMA: MulAdd is one fused rounding, as std::fma
// The fused search: four vectors of entries per block, their lane-wise minimum tested against the
// running best; the per-vector update (strict <, in entry order) runs only for a block where some
// lane improves, so the lanes end with the values and indices the plain update would leave.
template <int SUB>
HWY_INLINE int64_t nearest_fused_lanes(const float* transposed, const float* norms, int64_t entries, int sub_runtime,
                                       const float* x) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  constexpr int kMaxSub = 16;
  const int sub = SUB > 0 ? SUB : sub_runtime;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<decltype(d)> xe[SUB > 0 ? SUB : kMaxSub];
  for (int e = 0; e < sub; ++e) xe[e] = hn::Set(d, -2.0f * x[e]);
  const auto distance = [&](int64_t c) {
    auto dist = hn::LoadU(d, norms + c);
    for (int e = 0; e < sub; ++e) dist = hn::MulAdd(xe[e], hn::LoadU(d, transposed + e * entries + c), dist);
    return dist;
  };
  auto best = hn::Set(d, std::numeric_limits<float>::infinity());
  auto best_index = hn::Zero(di);
  const auto iota = hn::Iota(di, 0);
  const auto update = [&](hn::Vec<decltype(d)> dist, int64_t c) {
    const auto closer = hn::Lt(dist, best);
    best = hn::IfThenElse(closer, dist, best);
    best_index = hn::IfThenElse(hn::RebindMask(di, closer), hn::Add(iota, hn::Set(di, static_cast<int32_t>(c))),
                                best_index);
  };
  int64_t c = 0;
  for (; c + 4 * lanes <= entries; c += 4 * lanes) {
    const auto d0 = distance(c), d1 = distance(c + lanes), d2 = distance(c + 2 * lanes), d3 = distance(c + 3 * lanes);
    const auto low = hn::Min(hn::Min(d0, d1), hn::Min(d2, d3));
    if (hn::AllFalse(d, hn::Lt(low, best))) continue;
    update(d0, c);
    update(d1, c + lanes);
    update(d2, c + 2 * lanes);
    update(d3, c + 3 * lanes);
  }
  for (; c + lanes <= entries; c += lanes) update(distance(c), c);
  const int64_t whole = c;
  const float best_d = hn::GetLane(hn::MinOfLanes(d, best));
  const auto at_min = hn::RebindMask(di, hn::Eq(best, hn::Set(d, best_d)));
  const auto candidates = hn::IfThenElse(at_min, best_index, hn::Set(di, std::numeric_limits<int32_t>::max()));
  int64_t result = hn::GetLane(hn::MinOfLanes(di, candidates));
  if (whole == 0 || result == std::numeric_limits<int32_t>::max()) result = 0;
  float result_d = whole == 0 ? std::numeric_limits<float>::infinity() : best_d;
  for (; c < entries; ++c) {  // the last entries, in order
    float dist = norms[c];
    for (int e = 0; e < sub; ++e) dist = std::fma(-2.0f * x[e], transposed[e * entries + c], dist);
    if (c == 0 || dist < result_d) {
      result_d = dist;
      result = c;
    }
  }
  return result;
}

int64_t NearestFusedImpl(const float* transposed, const float* norms, int64_t entries, int sub, const float* x) {
  if (sub == 4) return nearest_fused_lanes<4>(transposed, norms, entries, sub, x);
  if (sub == 8) return nearest_fused_lanes<8>(transposed, norms, entries, sub, x);
  if (sub <= 16 && entries < (int64_t{1} << 31)) return nearest_fused_lanes<0>(transposed, norms, entries, sub, x);
  return scalar::nearest_codeword_fused(transposed, norms, entries, sub, x);
}
#else
int64_t NearestFusedImpl(const float* transposed, const float* norms, int64_t entries, int sub, const float* x) {
  return scalar::nearest_codeword_fused(transposed, norms, entries, sub, x);
}
#endif

int64_t NearestImpl(const float* transposed, const float* norms, int64_t entries, int sub, const float* x) {
  if (sub == 4) return nearest_lanes<Distance::kProduct, 4>(transposed, norms, entries, sub, x);
  if (sub == 8) return nearest_lanes<Distance::kProduct, 8>(transposed, norms, entries, sub, x);
  if (sub <= 16 && entries < (int64_t{1} << 31))
    return nearest_lanes<Distance::kProduct, 0>(transposed, norms, entries, sub, x);
  return scalar::nearest_codeword(transposed, norms, entries, sub, x);
}

int64_t NearestSquaredImpl(const float* transposed, int64_t entries, int sub, const float* x) {
  if (sub == 8) return nearest_lanes<Distance::kSquared, 8>(transposed, nullptr, entries, sub, x);
  if (sub <= 16 && entries < (int64_t{1} << 31))
    return nearest_lanes<Distance::kSquared, 0>(transposed, nullptr, entries, sub, x);
  return scalar::nearest_codeword_squared(transposed, entries, sub, x);
}
#else
int64_t NearestImpl(const float* transposed, const float* norms, int64_t entries, int sub, const float* x) {
  return scalar::nearest_codeword(transposed, norms, entries, sub, x);
}
int64_t NearestFusedImpl(const float* transposed, const float* norms, int64_t entries, int sub, const float* x) {
  return scalar::nearest_codeword_fused(transposed, norms, entries, sub, x);
}
int64_t NearestSquaredImpl(const float* transposed, int64_t entries, int sub, const float* x) {
  return scalar::nearest_codeword_squared(transposed, entries, sub, x);
}
#endif

}  // namespace veloxquant::pvq::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::pvq {
HWY_EXPORT(NearestImpl);
HWY_EXPORT(NearestSquaredImpl);
HWY_EXPORT(NearestFusedImpl);

int64_t nearest_codeword_fused(const float* transposed, const float* norms, int64_t entries, int sub, const float* x) {
  return HWY_DYNAMIC_DISPATCH(NearestFusedImpl)(transposed, norms, entries, sub, x);
}

int64_t nearest_codeword(const float* transposed, const float* norms, int64_t entries, int sub, const float* x) {
  return HWY_DYNAMIC_DISPATCH(NearestImpl)(transposed, norms, entries, sub, x);
}

int64_t nearest_codeword_squared(const float* transposed, int64_t entries, int sub, const float* x) {
  return HWY_DYNAMIC_DISPATCH(NearestSquaredImpl)(transposed, entries, sub, x);
}

namespace scalar {
int64_t nearest_codeword(const float* transposed, const float* norms, int64_t entries, int sub, const float* x) {
  int64_t best = 0;
  float best_d = 0.0f;
  for (int64_t c = 0; c < entries; ++c) {
    float dist = norms[c];
    for (int e = 0; e < sub; ++e) {
      const float term = (-2.0f * x[e]) * transposed[e * entries + c];
      dist = dist + term;
    }
    if (c == 0 || dist < best_d) {
      best_d = dist;
      best = c;
    }
  }
  return best;
}

int64_t nearest_codeword_fused(const float* transposed, const float* norms, int64_t entries, int sub, const float* x) {
  int64_t best = 0;
  float best_d = 0.0f;
  for (int64_t c = 0; c < entries; ++c) {
    float dist = norms[c];
    for (int e = 0; e < sub; ++e) dist = std::fma(-2.0f * x[e], transposed[e * entries + c], dist);
    if (c == 0 || dist < best_d) {
      best_d = dist;
      best = c;
    }
  }
  return best;
}

int64_t nearest_codeword_squared(const float* transposed, int64_t entries, int sub, const float* x) {
  int64_t best = 0;
  float best_d = std::numeric_limits<float>::infinity();
  for (int64_t c = 0; c < entries; ++c) {
    float dist = 0.0f;
    for (int e = 0; e < sub; ++e) {
      const float diff = x[e] - transposed[e * entries + c];
      dist = dist + diff * diff;
    }
    if (dist < best_d) {
      best_d = dist;
      best = c;
    }
  }
  return best;
}
}  // namespace scalar

}  // namespace veloxquant::pvq
#endif  // HWY_ONCE
