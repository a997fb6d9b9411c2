// Highway kernel for nearest_codeword.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/quant/nearest_codeword.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/quant/nearest_codeword.h"

#include <algorithm>
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
// smallest distance so far; the per-vector update (strict <, in entry order) runs only for a block
// holding a smaller one, and the lanes' merge then picks the same entry as the plain update.
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
    best_index =
        hn::IfThenElse(hn::RebindMask(di, closer), hn::Add(iota, hn::Set(di, static_cast<int32_t>(c))), best_index);
  };
  // The block test is against the smallest distance of all lanes so far (`bound`), not each lane's
  // own: a lane's minimum improves ~ln(entries / lanes) times, and with 16 lanes nearly every block
  // would hold one such improvement, while the overall minimum improves ~ln(blocks) times. Skipping
  // a block whose distances are all >= bound keeps the answer: the lowest index of the smallest d
  // lies in a block holding a distance below the bound of its time (an equal distance before it
  // would have a lower index), so that block is updated.
  auto bound = best;
  int64_t c = 0;
  for (; c + 4 * lanes <= entries; c += 4 * lanes) {
    const auto d0 = distance(c), d1 = distance(c + lanes), d2 = distance(c + 2 * lanes), d3 = distance(c + 3 * lanes);
    const auto low = hn::Min(hn::Min(d0, d1), hn::Min(d2, d3));
    if (hn::AllFalse(d, hn::Lt(low, bound))) continue;
    update(d0, c);
    update(d1, c + lanes);
    update(d2, c + 2 * lanes);
    update(d3, c + 3 * lanes);
    bound = hn::MinOfLanes(d, best);  // in every lane
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

// Up to kBatch points against one pass over the book: the same per-point search as above (blocks
// of two vectors here, to keep every point's running state in registers), each block's columns
// loaded once for all points. A 4096-entry book of 4-float codewords is 80 KB with its norms, more
// than L1: one point per pass was bound by the L2 reads, not by the arithmetic.
int64_t NearestFusedImpl(const float* transposed, const float* norms, int64_t entries, int sub, const float* x);
constexpr int kBatch = 4;
template <int SUB>
HWY_INLINE void nearest_fused_batch(const float* transposed, const float* norms, int64_t entries, const float* xs,
                                    int64_t count, int64_t x_stride, int64_t* out) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  using V = hn::Vec<decltype(d)>;
  using VI = hn::Vec<decltype(di)>;
  V xe[kBatch][SUB], best[kBatch], bound[kBatch];
  VI best_index[kBatch];
  for (int p = 0; p < kBatch; ++p) {
    const float* x = xs + (p < count ? p : 0) * x_stride;
    for (int e = 0; e < SUB; ++e) xe[p][e] = hn::Set(d, -2.0f * x[e]);
    best[p] = hn::Set(d, std::numeric_limits<float>::infinity());
    bound[p] = best[p];
    best_index[p] = hn::Zero(di);
  }
  const auto iota = hn::Iota(di, 0);
  int64_t c = 0;
  for (; c + 2 * lanes <= entries; c += 2 * lanes) {
    V col0[SUB], col1[SUB];
    for (int e = 0; e < SUB; ++e) {
      col0[e] = hn::LoadU(d, transposed + e * entries + c);
      col1[e] = hn::LoadU(d, transposed + e * entries + c + lanes);
    }
    const V n0 = hn::LoadU(d, norms + c), n1 = hn::LoadU(d, norms + c + lanes);
    for (int p = 0; p < kBatch; ++p) {
      V d0 = n0, d1 = n1;
      for (int e = 0; e < SUB; ++e) {
        d0 = hn::MulAdd(xe[p][e], col0[e], d0);
        d1 = hn::MulAdd(xe[p][e], col1[e], d1);
      }
      if (hn::AllFalse(d, hn::Lt(hn::Min(d0, d1), bound[p]))) continue;
      const auto closer0 = hn::Lt(d0, best[p]);
      best[p] = hn::IfThenElse(closer0, d0, best[p]);
      best_index[p] = hn::IfThenElse(hn::RebindMask(di, closer0), hn::Add(iota, hn::Set(di, static_cast<int32_t>(c))),
                                     best_index[p]);
      const auto closer1 = hn::Lt(d1, best[p]);
      best[p] = hn::IfThenElse(closer1, d1, best[p]);
      best_index[p] = hn::IfThenElse(hn::RebindMask(di, closer1),
                                     hn::Add(iota, hn::Set(di, static_cast<int32_t>(c + lanes))), best_index[p]);
      bound[p] = hn::MinOfLanes(d, best[p]);
    }
  }
  for (int p = 0; p < kBatch && p < count; ++p) {
    const float* x = xs + p * x_stride;
    for (int64_t cc = c; cc < entries; cc += lanes) {  // whole vectors past the last block
      if (cc + lanes > entries) break;
      V dist = hn::LoadU(d, norms + cc);
      for (int e = 0; e < SUB; ++e) dist = hn::MulAdd(xe[p][e], hn::LoadU(d, transposed + e * entries + cc), dist);
      const auto closer = hn::Lt(dist, best[p]);
      best[p] = hn::IfThenElse(closer, dist, best[p]);
      best_index[p] = hn::IfThenElse(hn::RebindMask(di, closer), hn::Add(iota, hn::Set(di, static_cast<int32_t>(cc))),
                                     best_index[p]);
    }
    const int64_t whole = c + (entries - c) / lanes * lanes;
    const float best_d = hn::GetLane(hn::MinOfLanes(d, best[p]));
    const auto at_min = hn::RebindMask(di, hn::Eq(best[p], hn::Set(d, best_d)));
    const auto candidates = hn::IfThenElse(at_min, best_index[p], hn::Set(di, std::numeric_limits<int32_t>::max()));
    int64_t result = hn::GetLane(hn::MinOfLanes(di, candidates));
    if (whole == 0 || result == std::numeric_limits<int32_t>::max()) result = 0;
    float result_d = whole == 0 ? std::numeric_limits<float>::infinity() : best_d;
    for (int64_t cc = whole; cc < entries; ++cc) {
      float dist = norms[cc];
      for (int e = 0; e < SUB; ++e) dist = std::fma(-2.0f * x[e], transposed[e * entries + cc], dist);
      if (cc == 0 || dist < result_d) {
        result_d = dist;
        result = cc;
      }
    }
    out[p] = result;
  }
}

void NearestFusedBatchImpl(const float* transposed, const float* norms, int64_t entries, int sub, const float* xs,
                           int64_t count, int64_t x_stride, int64_t* out) {
  if ((sub == 4 || sub == 8) && entries < (int64_t{1} << 31)) {
    for (int64_t i = 0; i < count; i += kBatch) {
      const int64_t n = std::min<int64_t>(kBatch, count - i);
      if (sub == 4) {
        nearest_fused_batch<4>(transposed, norms, entries, xs + i * x_stride, n, x_stride, out + i);
      } else {
        nearest_fused_batch<8>(transposed, norms, entries, xs + i * x_stride, n, x_stride, out + i);
      }
    }
    return;
  }
  for (int64_t i = 0; i < count; ++i) out[i] = NearestFusedImpl(transposed, norms, entries, sub, xs + i * x_stride);
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
void NearestFusedBatchImpl(const float* transposed, const float* norms, int64_t entries, int sub, const float* xs,
                           int64_t count, int64_t x_stride, int64_t* out) {
  for (int64_t i = 0; i < count; ++i)
    out[i] = scalar::nearest_codeword_fused(transposed, norms, entries, sub, xs + i * x_stride);
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
void NearestFusedBatchImpl(const float* transposed, const float* norms, int64_t entries, int sub, const float* xs,
                           int64_t count, int64_t x_stride, int64_t* out) {
  for (int64_t i = 0; i < count; ++i)
    out[i] = scalar::nearest_codeword_fused(transposed, norms, entries, sub, xs + i * x_stride);
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
HWY_EXPORT(NearestFusedBatchImpl);

void nearest_codewords_fused(const float* transposed, const float* norms, int64_t entries, int sub, const float* xs,
                             int64_t count, int64_t x_stride, int64_t* out) {
  HWY_DYNAMIC_DISPATCH(NearestFusedBatchImpl)(transposed, norms, entries, sub, xs, count, x_stride, out);
}

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
