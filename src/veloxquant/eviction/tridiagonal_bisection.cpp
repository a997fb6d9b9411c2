// Highway kernel for tridiagonal_bisection.h, compiled once per target and dispatched at run time;
// the scalar reference below runs the same operations in the same order on each eigenvalue.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/eviction/tridiagonal_bisection.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <limits>
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
// The scaled T has norm in [1/2, 1), so these are widths relative to |T|:
constexpr double kBisectWidth = 0x1p-52;     // a bracket this narrow is done (bisection's precision)
constexpr double kNewtonTol = 0x1p-48;       // a Newton step this small has converged (the next is ~its square)
constexpr double kProbe = 0x1p-50;           // the converged estimate is certified by counts this far either side,
constexpr double kCertifiedWidth = 0x1p-49;  // which leaves a bracket of 2 kProbe around it
}  // namespace veloxquant::eviction::bisection
#endif

HWY_BEFORE_NAMESPACE();
namespace veloxquant::eviction::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Sturm counts, and the Newton step of det(T - x I), at x[0..1] (two vectors of lanes: two
// independent multiply chains the core overlaps) over the scaled diagonal ds and squared
// off-diagonal e2s: count[v] = the number of eigenvalues below x[v] in each lane (as doubles),
// step[v] = p_n / p_n' (the minors' derivative chain p_i' = (d_i - x) p_{i-1}' - p_{i-1} -
// e_{i-1}^2 p_{i-2}' runs beside the minors and is rescaled with them, so the ratio is unchanged).
template <class D, class V = hn::Vec<D>>
HWY_INLINE void SturmNewton(D d, const double* ds, const double* e2s, int64_t n, const V (&x)[2], V (&count)[2],
                            V (&step)[2]) {
  namespace b = ::veloxquant::eviction::bisection;
  const V zero = hn::Zero(d), one = hn::Set(d, 1.0), pivmin = hn::Set(d, b::kPivmin);
  const V above = hn::Set(d, b::kRescaleAbove), below = hn::Set(d, b::kRescaleBelow);
  const V down = hn::Set(d, b::kDown), up = hn::Set(d, b::kUp);
  V p[2], prev[2], dp[2], dprev[2];
  for (int v = 0; v < 2; ++v) {
    prev[v] = one;
    dprev[v] = zero;
    dp[v] = hn::Neg(one);
    V q = hn::Sub(hn::Set(d, ds[0]), x[v]);
    q = hn::IfThenElse(hn::Lt(hn::Abs(q), pivmin), hn::Neg(pivmin), q);
    count[v] = hn::IfThenElseZero(hn::Lt(q, zero), one);
    p[v] = q;
  }
  for (int64_t i = 1; i < n; ++i) {
    const V di = hn::Set(d, ds[i]), e2 = hn::Set(d, e2s[i - 1]);
    for (int v = 0; v < 2; ++v) {
      const V shifted = hn::Sub(di, x[v]);
      V next = hn::Sub(hn::Mul(shifted, p[v]), hn::Mul(e2, prev[v]));
      const V dnext = hn::Sub(hn::Sub(hn::Mul(shifted, dp[v]), p[v]), hn::Mul(e2, dprev[v]));
      const V floor = hn::Mul(pivmin, p[v]);
      next = hn::IfThenElse(hn::Lt(hn::Abs(next), hn::Abs(floor)), hn::Neg(floor), next);
      count[v] = hn::Add(count[v], hn::IfThenElseZero(hn::Xor(hn::Lt(next, zero), hn::Lt(p[v], zero)), one));
      prev[v] = p[v];
      p[v] = next;
      dprev[v] = dp[v];
      dp[v] = dnext;
    }
    if (i % b::kRescaleEvery == 0) {
      for (int v = 0; v < 2; ++v) {
        const V m = hn::Max(hn::Abs(p[v]), hn::Abs(prev[v]));
        const V f = hn::IfThenElse(hn::Gt(m, above), down, hn::IfThenElse(hn::Lt(m, below), up, one));
        p[v] = hn::Mul(p[v], f);
        prev[v] = hn::Mul(prev[v], f);
        dp[v] = hn::Mul(dp[v], f);
        dprev[v] = hn::Mul(dprev[v], f);
      }
    }
  }
  for (int v = 0; v < 2; ++v) step[v] = hn::Div(p[v], dp[v]);
}

// out[r] for r < k: lane r finds the eigenvalue of ascending index target = n - 1 - r in [lo, hi),
// keeping count(lo) <= target < count(hi), by the rule of bisection.h's scalar reference
// (scalar::top_tridiagonal_eigenvalues below says each step and why); a lane's result is fixed when
// it finishes, and the loop runs until every lane has.
void BisectImpl(const double* ds, const double* e2s, int64_t n, int64_t k, double lo0, double hi0, int max_passes,
                double* out) {
  namespace b = ::veloxquant::eviction::bisection;
  const hn::ScalableTag<double> d;
  using V = hn::Vec<decltype(d)>;
  using M = hn::Mask<decltype(d)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const V half = hn::Set(d, 0.5), one = hn::Set(d, 1.0), delta = hn::Set(d, b::kProbe);
  const V newton_tol = hn::Set(d, b::kNewtonTol), bisect_width = hn::Set(d, b::kBisectWidth);
  const V certified_width = hn::Set(d, b::kCertifiedWidth);
  HWY_ALIGN double rank[2 * (HWY_MAX_BYTES / sizeof(double))];
  for (int64_t r0 = 0; r0 < k; r0 += 2 * lanes) {
    V lo[2], hi[2], clo[2], chi[2], target[2], x[2], step_old[2], best[2], result[2];
    M active[2];
    for (int64_t j = 0; j < 2 * lanes; ++j) rank[j] = static_cast<double>(n - 1 - std::min(r0 + j, k - 1));
    for (int v = 0; v < 2; ++v) {
      lo[v] = hn::Set(d, lo0);
      hi[v] = hn::Set(d, hi0);
      clo[v] = hn::Zero(d);
      chi[v] = hn::Set(d, static_cast<double>(n));
      target[v] = hn::Load(d, rank + v * lanes);
      x[v] = hn::Mul(hn::Add(lo[v], hi[v]), half);
      step_old[v] = hn::Sub(hi[v], lo[v]);
      best[v] = hn::Set(d, std::numeric_limits<double>::quiet_NaN());
      result[v] = hn::Zero(d);
      active[v] = hn::Eq(one, one);
    }
    for (int pass = 0; pass < max_passes; ++pass) {
      if (hn::AllFalse(d, active[0]) && hn::AllFalse(d, active[1])) break;
      V count[2], step[2];
      SturmNewton(d, ds, e2s, n, x, count, step);
      for (int v = 0; v < 2; ++v) {
        const M at_or_above = hn::Le(count[v], target[v]);  // the eigenvalue is >= x
        lo[v] = hn::IfThenElse(at_or_above, x[v], lo[v]);
        clo[v] = hn::IfThenElse(at_or_above, count[v], clo[v]);
        hi[v] = hn::IfThenElse(at_or_above, hi[v], x[v]);
        chi[v] = hn::IfThenElse(at_or_above, chi[v], count[v]);
        const V width = hn::Sub(hi[v], lo[v]);
        const V mid = hn::Mul(hn::Add(lo[v], hi[v]), half);
        const V newton = hn::Sub(x[v], step[v]);
        const V size = hn::Abs(step[v]);
        const M isolated = hn::Eq(hn::Sub(chi[v], clo[v]), one);
        const M inside = hn::And(hn::Lt(lo[v], newton), hn::Lt(newton, hi[v]));
        const M newton_ok = hn::And(hn::And(isolated, inside), hn::Le(hn::Add(size, size), step_old[v]));
        const M had_best = hn::And(hn::Le(lo[v], best[v]), hn::Le(best[v], hi[v]));
        // Converged: the step may round onto an end of the bracket (x is one), so the ends count.
        const M converged = hn::And(hn::And(isolated, hn::And(hn::Le(lo[v], newton), hn::Le(newton, hi[v]))),
                                    hn::And(hn::Le(size, newton_tol), hn::Le(hn::Add(size, size), step_old[v])));
        best[v] = hn::IfThenElse(hn::AndNot(had_best, converged), newton, best[v]);
        const M has_best = hn::And(hn::Le(lo[v], best[v]), hn::Le(best[v], hi[v]));
        const M done_best = hn::And(has_best, hn::Le(width, certified_width));
        const M done_mid = hn::Le(width, bisect_width);
        const M finish = hn::And(active[v], hn::Or(done_best, done_mid));
        result[v] = hn::IfThenElse(finish, hn::IfThenElse(done_best, best[v], mid), result[v]);
        active[v] = hn::AndNot(finish, active[v]);
        const V below_best = hn::Sub(best[v], delta);
        const V probe = hn::IfThenElse(hn::Lt(lo[v], below_best), below_best, hn::Add(best[v], delta));
        x[v] = hn::IfThenElse(has_best, probe, hn::IfThenElse(newton_ok, newton, mid));
        step_old[v] = hn::IfThenElse(has_best, step_old[v], hn::IfThenElse(newton_ok, size, width));
      }
    }
    for (int v = 0; v < 2; ++v) {  // out of passes: the certified estimate, else the bracket's midpoint
      const M has_best = hn::And(hn::Le(lo[v], best[v]), hn::Le(best[v], hi[v]));
      const V last = hn::IfThenElse(has_best, best[v], hn::Mul(hn::Add(lo[v], hi[v]), half));
      hn::Store(hn::IfThenElse(active[v], last, result[v]), d, rank + v * lanes);
    }
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
// interval widened past rounding, and the most passes a lane may take: twice bisection's to
// 2^-52 (a pass that takes a Newton step need not halve the bracket), and a few to certify.
struct ScaledTridiagonal {
  std::vector<double> d, e2;
  double lo = 0.0, hi = 0.0, scale = 1.0;
  int max_passes = 0;
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
  int passes = 0;
  for (double width = s.hi - s.lo; width > bisection::kBisectWidth; width *= 0.5) ++passes;
  s.max_passes = 2 * passes + 8;
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
  HWY_DYNAMIC_DISPATCH(BisectImpl)(s.d.data(), s.e2.data(), n, k, s.lo, s.hi, s.max_passes, out);
  unscale(s, k, out);
}

namespace scalar {
namespace {

// The count of eigenvalues below x and the Newton step p_n / p_n' (SturmNewton, one lane).
double sturm_newton(const ScaledTridiagonal& s, int64_t n, double x, double& step) {
  namespace b = bisection;
  double prev = 1.0, p = s.d[0] - x, dprev = 0.0, dp = -1.0;
  if (std::fabs(p) < b::kPivmin) p = -b::kPivmin;
  double count = p < 0.0 ? 1.0 : 0.0;
  for (int64_t i = 1; i < n; ++i) {
    const double shifted = s.d[static_cast<std::size_t>(i)] - x, e2 = s.e2[static_cast<std::size_t>(i - 1)];
    double next = shifted * p - e2 * prev;
    const double dnext = (shifted * dp - p) - e2 * dprev;
    const double floor = b::kPivmin * p;
    if (std::fabs(next) < std::fabs(floor)) next = -floor;
    if ((next < 0.0) != (p < 0.0)) count += 1.0;
    prev = p;
    p = next;
    dprev = dp;
    dp = dnext;
    if (i % b::kRescaleEvery == 0) {
      const double m = std::max(std::fabs(p), std::fabs(prev));
      const double f = m > b::kRescaleAbove ? b::kDown : m < b::kRescaleBelow ? b::kUp : 1.0;
      p *= f;
      prev *= f;
      dp *= f;
      dprev *= f;
    }
  }
  step = p / dp;
  return count;
}

// Whether `best` (NaN: none yet) lies in the bracket.
bool in_bracket(double lo, double best, double hi) { return lo <= best && best <= hi; }

}  // namespace

// One eigenvalue at a time, the rule each SIMD lane follows (the same operations in the same
// order). The bracket [lo, hi) keeps count(lo) <= target < count(hi). Each pass probes x, moves
// one end of the bracket to x, then picks the next probe:
//   - while the bracket holds only this eigenvalue (the counts at its ends differ by 1), a Newton
//     step on det(T - x I) that lands inside and is at most half the previous step (else the
//     midpoint: the safeguard that keeps bisection's progress; rtsafe's rule);
//   - once a Newton step is below kNewtonTol, its result `best` is certified by counts at
//     best - kProbe and best + kProbe: a bracket that narrow around it is done, the result
//     `best` (quadratic convergence put it at the rounding of the counts). A certificate that
//     fails puts best outside the bracket and the search goes on;
//   - a bracket of width 2^-52 is done too (clusters that never isolate: bisection's precision).
// A value Gram's top eigenvalues separate within 10-20 passes and Newton takes ~5 more, against
// bisection's fixed 54.
void top_tridiagonal_eigenvalues(const double* d, const double* e, int64_t n, int64_t k, double* out) {
  namespace b = bisection;
  if (k <= 0) return;
  ScaledTridiagonal s;
  if (!scale_tridiagonal(d, e, n, s)) {
    std::fill_n(out, k, 0.0);
    return;
  }
  for (int64_t r = 0; r < k; ++r) {
    const double target = static_cast<double>(n - 1 - r);
    double lo = s.lo, hi = s.hi, clo = 0.0, chi = static_cast<double>(n);
    double x = (lo + hi) * 0.5, step_old = hi - lo, best = std::numeric_limits<double>::quiet_NaN();
    bool done = false;
    for (int pass = 0; pass < s.max_passes && !done; ++pass) {
      double step = 0.0;
      const double count = sturm_newton(s, n, x, step);
      if (count <= target) {
        lo = x;
        clo = count;
      } else {
        hi = x;
        chi = count;
      }
      const double width = hi - lo, mid = (lo + hi) * 0.5, newton = x - step, size = std::fabs(step);
      const bool newton_ok = chi - clo == 1.0 && lo < newton && newton < hi && size + size <= step_old;
      // Converged: the step may round onto an end of the bracket (x is one), so the ends count.
      const bool converged =
          chi - clo == 1.0 && in_bracket(lo, newton, hi) && size <= b::kNewtonTol && size + size <= step_old;
      if (!in_bracket(lo, best, hi) && converged) best = newton;
      const bool has_best = in_bracket(lo, best, hi);
      if (has_best && width <= b::kCertifiedWidth) {
        out[r] = best;
        done = true;
      } else if (width <= b::kBisectWidth) {
        out[r] = mid;
        done = true;
      }
      if (has_best) {
        x = lo < best - b::kProbe ? best - b::kProbe : best + b::kProbe;
      } else if (newton_ok) {
        x = newton;
        step_old = size;
      } else {
        x = mid;
        step_old = width;
      }
    }
    if (!done) out[r] = in_bracket(lo, best, hi) ? best : (lo + hi) * 0.5;
  }
  unscale(s, k, out);
}
}  // namespace scalar

}  // namespace veloxquant::eviction
#endif  // HWY_ONCE
