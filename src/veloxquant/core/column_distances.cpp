// Highway kernels for column_distances.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/core/column_distances.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/core/column_distances.h"

#include <limits>

HWY_BEFORE_NAMESPACE();
namespace veloxquant::core::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR && HWY_HAVE_FLOAT64
using DD = hn::ScalableTag<double>;

// The distances of one vector of columns starting at c (coordinates widened from float).
HWY_INLINE hn::Vec<DD> distances_at(const hn::Vec<DD>* point, const float* cols, int64_t c, int64_t dim, int64_t ld) {
  const DD dd;
  const hn::Rebind<float, DD> df;
  auto d = hn::Zero(dd);
  for (int64_t k = 0; k < dim; ++k) {
    const auto diff = hn::Sub(point[k], hn::PromoteTo(dd, hn::LoadU(df, cols + k * ld + c)));
    d = hn::Add(d, hn::Mul(diff, diff));
  }
  return d;
}

constexpr int64_t kMaxDim = 16;  // coordinates held in registers; wider points take the scalar loop

int32_t NearestImpl(const float* v, const float* cols, int64_t count, int64_t dim, int64_t ld) {
  if (dim > kMaxDim || count >= (int64_t{1} << 31)) return scalar::nearest_column(v, cols, count, dim, ld);
  const DD dd;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(dd));
  hn::Vec<DD> point[kMaxDim];
  for (int64_t k = 0; k < dim; ++k) point[k] = hn::Set(dd, static_cast<double>(v[k]));
  // Each lane keeps its smallest distance (strict <, so its lowest index of it) and that index.
  const double inf = std::numeric_limits<double>::infinity();
  auto best = hn::Set(dd, inf);
  auto best_index = hn::Zero(dd);  // indices as doubles: exact below 2^53
  auto index = hn::Iota(dd, 0.0);
  const auto step = hn::Set(dd, static_cast<double>(lanes));
  const int64_t whole = count - count % lanes;
  for (int64_t c = 0; c < whole; c += lanes) {
    const auto d = distances_at(point, cols, c, dim, ld);
    const auto closer = hn::Lt(d, best);
    best = hn::IfThenElse(closer, d, best);
    best_index = hn::IfThenElse(closer, index, best_index);
    index = hn::Add(index, step);
  }
  // The lanes merged: the smallest distance, then the lowest index holding it (a lane that never
  // went below +inf holds nothing); then the last columns in order, all above every lane's index.
  HWY_ALIGN double lane_d[hn::MaxLanes(dd)];
  HWY_ALIGN double lane_i[hn::MaxLanes(dd)];
  hn::Store(best, dd, lane_d);
  hn::Store(best_index, dd, lane_i);
  double best_d = inf;
  int32_t result = 0;
  for (int64_t l = 0; l < lanes && whole > 0; ++l) {
    const auto i = static_cast<int32_t>(lane_i[l]);
    if (lane_d[l] < best_d || (lane_d[l] == best_d && lane_d[l] < inf && i < result)) {
      best_d = lane_d[l];
      result = i;
    }
  }
  for (int64_t c = whole; c < count; ++c) {
    double d = 0.0;
    for (int64_t k = 0; k < dim; ++k) {
      const double diff = static_cast<double>(v[k]) - static_cast<double>(cols[k * ld + c]);
      d = d + diff * diff;
    }
    if (d < best_d) {
      best_d = d;
      result = static_cast<int32_t>(c);
    }
  }
  return result;
}

void DistancesImpl(const float* v, const float* cols, int64_t count, int64_t dim, int64_t ld, double* out) {
  if (dim > kMaxDim) return scalar::column_distances(v, cols, count, dim, ld, out);
  const DD dd;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(dd));
  hn::Vec<DD> point[kMaxDim];
  for (int64_t k = 0; k < dim; ++k) point[k] = hn::Set(dd, static_cast<double>(v[k]));
  int64_t c = 0;
  for (; c + lanes <= count; c += lanes) hn::StoreU(distances_at(point, cols, c, dim, ld), dd, out + c);
  if (c < count) scalar::column_distances(v, cols + c, count - c, dim, ld, out + c);
}
#else
int32_t NearestImpl(const float* v, const float* cols, int64_t count, int64_t dim, int64_t ld) {
  return scalar::nearest_column(v, cols, count, dim, ld);
}
void DistancesImpl(const float* v, const float* cols, int64_t count, int64_t dim, int64_t ld, double* out) {
  scalar::column_distances(v, cols, count, dim, ld, out);
}
#endif

}  // namespace veloxquant::core::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::core {
HWY_EXPORT(NearestImpl);
HWY_EXPORT(DistancesImpl);

int32_t nearest_column(const float* v, const float* cols, int64_t count, int64_t dim, int64_t ld) {
  return HWY_DYNAMIC_DISPATCH(NearestImpl)(v, cols, count, dim, ld);
}

void column_distances(const float* v, const float* cols, int64_t count, int64_t dim, int64_t ld, double* out) {
  HWY_DYNAMIC_DISPATCH(DistancesImpl)(v, cols, count, dim, ld, out);
}

namespace scalar {
void column_distances(const float* v, const float* cols, int64_t count, int64_t dim, int64_t ld, double* out) {
  for (int64_t c = 0; c < count; ++c) {
    double d = 0.0;
    for (int64_t k = 0; k < dim; ++k) {
      const double diff = static_cast<double>(v[k]) - static_cast<double>(cols[k * ld + c]);
      d = d + diff * diff;
    }
    out[c] = d;
  }
}

int32_t nearest_column(const float* v, const float* cols, int64_t count, int64_t dim, int64_t ld) {
  int32_t best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < count; ++c) {
    double d = 0.0;
    for (int64_t k = 0; k < dim; ++k) {
      const double diff = static_cast<double>(v[k]) - static_cast<double>(cols[k * ld + c]);
      d = d + diff * diff;
    }
    if (d < best_d) {
      best_d = d;
      best = static_cast<int32_t>(c);
    }
  }
  return best;
}
}  // namespace scalar

}  // namespace veloxquant::core
#endif  // HWY_ONCE
