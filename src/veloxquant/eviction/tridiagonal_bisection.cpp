// Highway kernel for tridiagonal_bisection.h, compiled once per target and dispatched at run time;
// the scalar reference below runs the same operations in the same order on each eigenvalue.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/eviction/tridiagonal_bisection.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "veloxquant/eviction/tridiagonal_bisection.h"

#ifndef VELOXQUANT_TRIDIAGONAL_BISECTION_CONSTANTS
#define VELOXQUANT_TRIDIAGONAL_BISECTION_CONSTANTS
namespace veloxquant::eviction::bisection {
constexpr double kPivmin = 0x1p-70;         // a minor below pivmin times the previous one becomes -pivmin times it
constexpr double kRescaleAbove = 0x1p300;   // the pair of minors is scaled down above this ...
constexpr double kRescaleBelow = 0x1p-300;  // ... and up below this, every kRescaleEvery steps
constexpr double kDown = 0x1p-300, kUp = 0x1p300;
constexpr int64_t kRescaleEvery = 4;  // 4 steps change a minor by at most 3^4 or pivmin^4: no overflow or underflow
}  // namespace veloxquant::eviction::bisection
#endif

HWY_BEFORE_NAMESPACE();
namespace veloxquant::eviction::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Sturm counts at x[0..1] (two vectors of lanes: two independent multiply chains the core
// overlaps) over the scaled diagonal ds and squared off-diagonal e2s; count[v] += the number of
// eigenvalues below x[v] in each lane (as doubles).
template <class D, class V = hn::Vec<D>>
HWY_INLINE void SturmCounts(D d, const double* ds, const double* e2s, int64_t n, const V (&x)[2], V (&count)[2]) {
  namespace b = ::veloxquant::eviction::bisection;
  const V zero = hn::Zero(d), one = hn::Set(d, 1.0), pivmin = hn::Set(d, b::kPivmin);
  const V above = hn::Set(d, b::kRescaleAbove), below = hn::Set(d, b::kRescaleBelow);
  const V down = hn::Set(d, b::kDown), up = hn::Set(d, b::kUp);
  V p[2], prev[2];
  for (int v = 0; v < 2; ++v) {
    prev[v] = one;
    V q = hn::Sub(hn::Set(d, ds[0]), x[v]);
    q = hn::IfThenElse(hn::Lt(hn::Abs(q), pivmin), hn::Neg(pivmin), q);
    count[v] = hn::IfThenElseZero(hn::Lt(q, zero), one);
    p[v] = q;
  }
  for (int64_t i = 1; i < n; ++i) {
    const V di = hn::Set(d, ds[i]), e2 = hn::Set(d, e2s[i - 1]);
    for (int v = 0; v < 2; ++v) {
      V next = hn::Sub(hn::Mul(hn::Sub(di, x[v]), p[v]), hn::Mul(e2, prev[v]));
      const V floor = hn::Mul(pivmin, p[v]);
      next = hn::IfThenElse(hn::Lt(hn::Abs(next), hn::Abs(floor)), hn::Neg(floor), next);
      count[v] = hn::Add(count[v], hn::IfThenElseZero(hn::Xor(hn::Lt(next, zero), hn::Lt(p[v], zero)), one));
      prev[v] = p[v];
      p[v] = next;
    }
    if (i % b::kRescaleEvery == 0) {
      for (int v = 0; v < 2; ++v) {
        const V m = hn::Max(hn::Abs(p[v]), hn::Abs(prev[v]));
        const V f = hn::IfThenElse(hn::Gt(m, above), down, hn::IfThenElse(hn::Lt(m, below), up, one));
        p[v] = hn::Mul(p[v], f);
        prev[v] = hn::Mul(prev[v], f);
      }
    }
  }
}

// out[r] for r < k: lane r bisects [lo, hi) for the eigenvalue of ascending index n - 1 - r,
// keeping count(lo) <= n - 1 - r < count(hi), `passes` times; out is the final midpoint.
void BisectImpl(const double* ds, const double* e2s, int64_t n, int64_t k, double lo0, double hi0, int passes,
                double* out) {
  const hn::ScalableTag<double> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const V half = hn::Set(d, 0.5);
  HWY_ALIGN double rank[2 * (HWY_MAX_BYTES / sizeof(double))];
  for (int64_t r0 = 0; r0 < k; r0 += 2 * lanes) {
    V lo[2], hi[2], target[2];
    for (int64_t j = 0; j < 2 * lanes; ++j) rank[j] = static_cast<double>(n - 1 - std::min(r0 + j, k - 1));
    for (int v = 0; v < 2; ++v) {
      lo[v] = hn::Set(d, lo0);
      hi[v] = hn::Set(d, hi0);
      target[v] = hn::Load(d, rank + v * lanes);
    }
    for (int pass = 0; pass < passes; ++pass) {
      V mid[2], count[2];
      for (int v = 0; v < 2; ++v) mid[v] = hn::Mul(hn::Add(lo[v], hi[v]), half);
      SturmCounts(d, ds, e2s, n, mid, count);
      for (int v = 0; v < 2; ++v) {
        const auto at_or_above = hn::Le(count[v], target[v]);  // the eigenvalue is >= mid
        lo[v] = hn::IfThenElse(at_or_above, mid[v], lo[v]);
        hi[v] = hn::IfThenElse(at_or_above, hi[v], mid[v]);
      }
    }
    for (int v = 0; v < 2; ++v) hn::Store(hn::Mul(hn::Add(lo[v], hi[v]), half), d, rank + v * lanes);
    for (int64_t j = 0; j < 2 * lanes && r0 + j < k; ++j) out[r0 + j] = rank[j];
  }
}

}  // namespace veloxquant::eviction::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::eviction {
HWY_EXPORT(BisectImpl);

namespace {

// T scaled by a power of two to norm in [1/2, 1): diagonal, squared off-diagonal, the Gershgorin
// interval widened past rounding, and the passes that shrink it to 2^-52.
struct ScaledTridiagonal {
  std::vector<double> d, e2;
  double lo = 0.0, hi = 0.0, scale = 1.0;
  int passes = 0;
};

// Returns false when T is zero (every eigenvalue 0).
bool scale_tridiagonal(const double* d, const double* e, int64_t n, ScaledTridiagonal& s) {
  double norm = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double left = i > 0 ? std::fabs(e[i - 1]) : 0.0, right = i + 1 < n ? std::fabs(e[i]) : 0.0;
    norm = std::max(norm, std::fabs(d[i]) + left + right);
  }
  if (!(norm > 0.0)) return false;
  int exponent = 0;
  std::frexp(norm, &exponent);
  s.scale = std::ldexp(1.0, -exponent);
  s.d.resize(static_cast<std::size_t>(n));
  s.e2.resize(static_cast<std::size_t>(n));
  double lo = 0.0, hi = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double di = d[i] * s.scale;
    const double left = i > 0 ? std::fabs(e[i - 1] * s.scale) : 0.0;
    const double right = i + 1 < n ? std::fabs(e[i] * s.scale) : 0.0;
    s.d[static_cast<std::size_t>(i)] = di;
    s.e2[static_cast<std::size_t>(i)] = i + 1 < n ? (e[i] * s.scale) * (e[i] * s.scale) : 0.0;
    lo = i == 0 ? di - left - right : std::min(lo, di - left - right);
    hi = i == 0 ? di + left + right : std::max(hi, di + left + right);
  }
  s.lo = lo - 0x1p-48;
  s.hi = hi + 0x1p-48;
  s.passes = 0;
  for (double width = s.hi - s.lo; width > 0x1p-52; width *= 0.5) ++s.passes;
  return true;
}

void unscale(const ScaledTridiagonal& s, int64_t k, double* out) {
  const double inverse = 1.0 / s.scale;  // a power of two: exact
  for (int64_t r = 0; r < k; ++r) out[r] *= inverse;
}

}  // namespace

void top_tridiagonal_eigenvalues(const double* d, const double* e, int64_t n, int64_t k, double* out) {
  if (k <= 0) return;
  // This thread's buffers, reused: curdkv calls this for every leverage problem.
  thread_local ScaledTridiagonal s;
  if (!scale_tridiagonal(d, e, n, s)) {
    std::fill_n(out, k, 0.0);
    return;
  }
  HWY_DYNAMIC_DISPATCH(BisectImpl)(s.d.data(), s.e2.data(), n, k, s.lo, s.hi, s.passes, out);
  unscale(s, k, out);
}

namespace scalar {
namespace {
double sturm_count(const ScaledTridiagonal& s, int64_t n, double x) {
  namespace b = bisection;
  double prev = 1.0, p = s.d[0] - x;
  if (std::fabs(p) < b::kPivmin) p = -b::kPivmin;
  double count = p < 0.0 ? 1.0 : 0.0;
  for (int64_t i = 1; i < n; ++i) {
    double next = (s.d[static_cast<std::size_t>(i)] - x) * p - s.e2[static_cast<std::size_t>(i - 1)] * prev;
    const double floor = b::kPivmin * p;
    if (std::fabs(next) < std::fabs(floor)) next = -floor;
    if ((next < 0.0) != (p < 0.0)) count += 1.0;
    prev = p;
    p = next;
    if (i % b::kRescaleEvery == 0) {
      const double m = std::max(std::fabs(p), std::fabs(prev));
      const double f = m > b::kRescaleAbove ? b::kDown : m < b::kRescaleBelow ? b::kUp : 1.0;
      p *= f;
      prev *= f;
    }
  }
  return count;
}
}  // namespace

void top_tridiagonal_eigenvalues(const double* d, const double* e, int64_t n, int64_t k, double* out) {
  if (k <= 0) return;
  ScaledTridiagonal s;
  if (!scale_tridiagonal(d, e, n, s)) {
    std::fill_n(out, k, 0.0);
    return;
  }
  for (int64_t r = 0; r < k; ++r) {
    const double target = static_cast<double>(n - 1 - r);
    double lo = s.lo, hi = s.hi;
    for (int pass = 0; pass < s.passes; ++pass) {
      const double mid = (lo + hi) * 0.5;
      if (sturm_count(s, n, mid) <= target) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    out[r] = (lo + hi) * 0.5;
  }
  unscale(s, k, out);
}
}  // namespace scalar

}  // namespace veloxquant::eviction
#endif  // HWY_ONCE
