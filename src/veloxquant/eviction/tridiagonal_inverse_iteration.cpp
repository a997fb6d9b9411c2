// Highway kernel for tridiagonal_inverse_iteration.h, compiled once per target and dispatched at
// run time; the scalar reference at the end is the one-vector-at-a-time loop the SIMD path must
// reproduce bit for bit.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/eviction/tridiagonal_inverse_iteration.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "veloxquant/eviction/tridiagonal_inverse_iteration.h"

#ifndef VELOXQUANT_TRIDIAGONAL_INVERSE_ITERATION_SHARED
#define VELOXQUANT_TRIDIAGONAL_INVERSE_ITERATION_SHARED
// What the SIMD path's one-lane-at-a-time part and the scalar reference both use.
namespace veloxquant::eviction::inverse_iteration {

// The replacement for a zero pivot: eps times T's largest row sum |d_i| + 2 |e_i|.
inline double pivot_floor(const double* d, const double* e, int64_t n) {
  double scale = 0.0;
  for (int64_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(d[i]) + 2.0 * (i + 1 < n ? std::fabs(e[i]) : 0.0));
  return std::max(scale, 1e-300) * std::numeric_limits<double>::epsilon();
}

// The fixed start vector, computed once per size and thread (1,024 sin calls per 64 x 64 problem
// otherwise).
inline const std::vector<double>& start_vector(int64_t n) {
  thread_local std::vector<double> start;
  if (start.size() != static_cast<std::size_t>(n)) {
    start.resize(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) start[static_cast<std::size_t>(i)] = 1.0 + 0.5 * std::sin(1.0 + 3.7 * i);
  }
  return start;
}

// sum a[i] b[i] in four interleaved partial sums (independent add chains: a sequential sum of
// 64 terms waits on each add's latency), then combined.
inline double split_dot(const double* a, const double* b, int64_t n) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

// x minus its projections on the unit vectors previous[0..count) (rows of n), one after the other.
inline void subtract_projections(const double* previous, int64_t count, int64_t n, double* x) {
  for (int64_t r = 0; r < count; ++r) {
    const double* p = previous + r * n;
    const double dot = split_dot(p, x, n);
    for (int64_t i = 0; i < n; ++i) x[i] -= dot * p[i];
  }
}

// x / |x|; a vanished x (the start lay in the span of the earlier vectors) becomes the unit vector
// e_{index mod n}, which the next solve (or the caller) takes as it is.
inline void normalize_or_unit(double* x, int64_t n, int64_t index) {
  const double norm = std::sqrt(split_dot(x, x, n));
  if (norm == 0.0) {
    std::fill_n(x, n, 0.0);
    x[index % n] = 1.0;
    return;
  }
  const double inverse_norm = 1.0 / norm;
  for (int64_t i = 0; i < n; ++i) x[i] *= inverse_norm;
}

}  // namespace veloxquant::eviction::inverse_iteration
#endif

HWY_BEFORE_NAMESPACE();
namespace veloxquant::eviction::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The factors of T - lambda I for every lane (one eigenvalue a lane), row i of each array at
// i * stride: U's diagonal (as reciprocals: the solves multiply), first and second superdiagonal,
// L's multipliers, and whether rows i and i + 1 were swapped (1.0 or 0.0).
struct LaneFactors {
  std::vector<double> inverse_pivot, du, du2, dl, swapped;
  int64_t stride = 0;
};

// Factors B blocks of lanes from column c on: dgttrf's elimination with the row swap as blends, B
// latency chains (a division each step) side by side.
template <int B, class D>
HWY_INLINE void FactorLanes(D d, const double* diag, const double* off, int64_t n, const double* lambdas, double tiny,
                            int64_t c, LaneFactors& f) {
  using V = hn::Vec<D>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t stride = f.stride;
  const V zero = hn::Zero(d), one = hn::Set(d, 1.0), floor = hn::Set(d, tiny);
  V lambda[B], pivot_in[B], upper_in[B];  // row i's diagonal and superdiagonal as elimination left them
  for (int b = 0; b < B; ++b) {
    lambda[b] = hn::LoadU(d, lambdas + c + b * lanes);
    pivot_in[b] = hn::Sub(hn::Set(d, diag[0]), lambda[b]);
    upper_in[b] = hn::Set(d, n > 1 ? off[0] : 0.0);
  }
  for (int64_t i = 0; i + 1 < n; ++i) {
    const V below = hn::Set(d, off[i]);                             // the subdiagonal entry under row i
    const V next_upper = hn::Set(d, i + 2 < n ? off[i + 1] : 0.0);  // row i + 1's superdiagonal
    for (int b = 0; b < B; ++b) {
      const int64_t at = i * stride + c + b * lanes;
      const V next_diag = hn::Sub(hn::Set(d, diag[i + 1]), lambda[b]);
      const auto keep = hn::Ge(hn::Abs(pivot_in[b]), hn::Abs(below));  // no swap: |pivot| is the larger
      const V pivot = hn::IfThenElse(hn::And(keep, hn::Eq(pivot_in[b], zero)), floor, pivot_in[b]);
      const V multiplier = hn::Div(hn::IfThenElse(keep, below, pivot), hn::IfThenElse(keep, pivot, below));
      hn::StoreU(multiplier, d, f.dl.data() + at);
      hn::StoreU(hn::Div(one, hn::IfThenElse(keep, pivot, below)), d, f.inverse_pivot.data() + at);
      hn::StoreU(hn::IfThenElse(keep, upper_in[b], next_diag), d, f.du.data() + at);
      hn::StoreU(hn::IfThenElseZero(hn::Not(keep), next_upper), d, f.du2.data() + at);
      hn::StoreU(hn::IfThenElseZero(hn::Not(keep), one), d, f.swapped.data() + at);
      pivot_in[b] = hn::IfThenElse(keep, hn::Sub(next_diag, hn::Mul(multiplier, upper_in[b])),
                                   hn::Sub(upper_in[b], hn::Mul(multiplier, next_diag)));
      upper_in[b] = hn::IfThenElse(keep, next_upper, hn::Mul(hn::Neg(multiplier), next_upper));
    }
  }
  for (int b = 0; b < B; ++b) {
    const int64_t at = (n - 1) * stride + c + b * lanes;
    const V pivot = hn::IfThenElse(hn::Eq(pivot_in[b], zero), floor, pivot_in[b]);
    hn::StoreU(hn::Div(one, pivot), d, f.inverse_pivot.data() + at);
    hn::StoreU(zero, d, f.dl.data() + at);
    hn::StoreU(zero, d, f.du.data() + at);
    hn::StoreU(zero, d, f.du2.data() + at);
    hn::StoreU(zero, d, f.swapped.data() + at);
  }
}

// y (n rows of stride) = (T - lambda I)^-1 start for B blocks of lanes from column c on: the
// forward pass with the factorisation's swaps as blends, then the back substitution.
template <int B, class D>
HWY_INLINE void SolveLanes(D d, const LaneFactors& f, int64_t n, const double* start, int64_t c, double* y) {
  using V = hn::Vec<D>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t stride = f.stride;
  const V zero = hn::Zero(d);
  V carried[B];  // x[i + 1] after the eliminations so far
  for (int b = 0; b < B; ++b) carried[b] = hn::Set(d, start[0]);
  for (int64_t i = 0; i + 1 < n; ++i) {
    const V next = hn::Set(d, start[i + 1]);
    for (int b = 0; b < B; ++b) {
      const int64_t at = i * stride + c + b * lanes;
      const auto swap = hn::Ne(hn::LoadU(d, f.swapped.data() + at), zero);
      const V row = hn::IfThenElse(swap, next, carried[b]);
      const V other = hn::IfThenElse(swap, carried[b], next);
      hn::StoreU(row, d, y + at);
      carried[b] = hn::Sub(other, hn::Mul(hn::LoadU(d, f.dl.data() + at), row));
    }
  }
  V x1[B], x2[B];  // x[i + 1], x[i + 2] of the back substitution
  for (int b = 0; b < B; ++b) {
    hn::StoreU(carried[b], d, y + (n - 1) * stride + c + b * lanes);
    x1[b] = x2[b] = zero;
  }
  for (int64_t i = n - 1; i >= 0; --i) {
    for (int b = 0; b < B; ++b) {
      const int64_t at = i * stride + c + b * lanes;
      V v = hn::LoadU(d, y + at);
      if (i + 1 < n) v = hn::Sub(v, hn::Mul(hn::LoadU(d, f.du.data() + at), x1[b]));
      if (i + 2 < n) v = hn::Sub(v, hn::Mul(hn::LoadU(d, f.du2.data() + at), x2[b]));
      const V x = hn::Mul(v, hn::LoadU(d, f.inverse_pivot.data() + at));
      hn::StoreU(x, d, y + at);
      x2[b] = x1[b];
      x1[b] = x;
    }
  }
}

// Every lane of the block at column c loses its projection on the unit vector p (n entries): the
// scalar split_dot's four partial sums per lane, then x -= dot p.
template <class D>
HWY_INLINE void SubtractProjectionLanes(D d, const double* p, int64_t n, int64_t stride, int64_t c, double* y) {
  using V = hn::Vec<D>;
  V s[4];
  for (V& v : s) v = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int q = 0; q < 4; ++q)
      s[q] = hn::Add(s[q], hn::Mul(hn::Set(d, p[i + q]), hn::LoadU(d, y + (i + q) * stride + c)));
  }
  for (; i < n; ++i) s[0] = hn::Add(s[0], hn::Mul(hn::Set(d, p[i]), hn::LoadU(d, y + i * stride + c)));
  const V dot = hn::Add(hn::Add(s[0], s[1]), hn::Add(s[2], s[3]));
  for (i = 0; i < n; ++i) {
    double* x = y + i * stride + c;
    hn::StoreU(hn::Sub(hn::LoadU(d, x), hn::Mul(dot, hn::Set(d, p[i]))), d, x);
  }
}

// The second solve of one lane, as the scalar reference does it (x holds n entries).
inline void SolveOneLane(const LaneFactors& f, int64_t n, int64_t lane, double* x) {
  const int64_t stride = f.stride;
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t at = i * stride + lane;
    const bool swap = f.swapped[static_cast<std::size_t>(at)] != 0.0;
    const double row = swap ? x[i + 1] : x[i], other = swap ? x[i] : x[i + 1];
    x[i] = row;
    x[i + 1] = other - f.dl[static_cast<std::size_t>(at)] * row;
  }
  for (int64_t i = n - 1; i >= 0; --i) {
    const std::size_t at = static_cast<std::size_t>(i * stride + lane);
    double v = x[i];
    if (i + 1 < n) v -= f.du[at] * x[i + 1];
    if (i + 2 < n) v -= f.du2[at] * x[i + 2];
    x[i] = v * f.inverse_pivot[at];
  }
}

void InverseIterationImpl(const double* diag, const double* off, int64_t n, const double* lambdas, int64_t k,
                          double* vectors) {
  namespace ii = ::veloxquant::eviction::inverse_iteration;
  const hn::ScalableTag<double> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  // This thread's buffers, reused: curdkv solves two of these problems per token, layer and head.
  thread_local LaneFactors f;
  thread_local std::vector<double> padded, y, x;
  const int64_t stride = (k + lanes - 1) / lanes * lanes;
  const std::size_t cells = static_cast<std::size_t>(n * stride);
  f.stride = stride;
  for (std::vector<double>* v : {&f.inverse_pivot, &f.du, &f.du2, &f.dl, &f.swapped, &y}) v->resize(cells);
  padded.assign(lambdas, lambdas + k);
  padded.resize(static_cast<std::size_t>(stride), lambdas[k - 1]);  // spare lanes repeat the last
  const double tiny = ii::pivot_floor(diag, off, n);
  const double* start = ii::start_vector(n).data();
  // Every factorisation and first solve, independent of one another.
  int64_t c = 0;
  for (; c + 2 * lanes <= stride; c += 2 * lanes) {
    FactorLanes<2>(d, diag, off, n, padded.data(), tiny, c, f);
    SolveLanes<2>(d, f, n, start, c, y.data());
  }
  for (; c < stride; c += lanes) {
    FactorLanes<1>(d, diag, off, n, padded.data(), tiny, c, f);
    SolveLanes<1>(d, f, n, start, c, y.data());
  }
  x.resize(static_cast<std::size_t>(n));
  for (int64_t r = 0; r < k; ++r) {
    // Lane r has lost its projections on vectors 0..r-1 (below, as each became final).
    for (int64_t i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = y[static_cast<std::size_t>(i * stride + r)];
    ii::normalize_or_unit(x.data(), n, r);
    SolveOneLane(f, n, r, x.data());
    ii::subtract_projections(vectors, r, n, x.data());
    ii::normalize_or_unit(x.data(), n, r);
    double* out = vectors + r * n;
    std::copy(x.begin(), x.end(), out);
    // The first Gram-Schmidt pass of every later lane, its step for vector r.
    for (int64_t block = (r + 1) / lanes * lanes; r + 1 < k && block < stride; block += lanes)
      SubtractProjectionLanes(d, out, n, stride, block, y.data());
  }
}

}  // namespace veloxquant::eviction::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::eviction {
HWY_EXPORT(InverseIterationImpl);

void tridiagonal_inverse_iteration(const double* d, const double* e, int64_t n, const double* lambdas, int64_t k,
                                   double* vectors) {
  if (k <= 0 || n <= 0) return;
  HWY_DYNAMIC_DISPATCH(InverseIterationImpl)(d, e, n, lambdas, k, vectors);
}

namespace scalar {
// One eigenvalue after the other: factor, then solve / orthogonalise / normalise twice.
void tridiagonal_inverse_iteration(const double* d, const double* e, int64_t n, const double* lambdas, int64_t k,
                                   double* vectors) {
  namespace ii = inverse_iteration;
  if (k <= 0 || n <= 0) return;
  const std::size_t nn = static_cast<std::size_t>(n);
  const double tiny = ii::pivot_floor(d, e, n);
  const std::vector<double>& start = ii::start_vector(n);
  std::vector<double> dd(nn), dl(nn), du(nn), du2(nn), x(nn);
  std::vector<char> swapped(nn);
  for (int64_t r = 0; r < k; ++r) {
    std::fill(dl.begin(), dl.end(), 0.0);
    std::fill(du.begin(), du.end(), 0.0);
    std::fill(du2.begin(), du2.end(), 0.0);
    std::fill(swapped.begin(), swapped.end(), 0);
    for (std::size_t i = 0; i < nn; ++i) dd[i] = d[i] - lambdas[r];
    for (std::size_t i = 0; i + 1 < nn; ++i) dl[i] = du[i] = e[i];
    for (std::size_t a = 0; a + 1 < nn; ++a) {
      const std::size_t b = a + 1;
      if (std::fabs(dd[a]) >= std::fabs(dl[a])) {
        if (dd[a] == 0.0) dd[a] = tiny;
        const double m = dl[a] / dd[a];
        dl[a] = m;
        dd[b] -= m * du[a];
      } else {  // swap rows a and b
        const double m = dd[a] / dl[a];
        dd[a] = dl[a];
        dl[a] = m;
        const double upper = du[a];
        du[a] = dd[b];
        dd[b] = upper - m * dd[b];
        if (b + 1 < nn) {
          du2[a] = du[b];
          du[b] = -m * du[b];
        }
        swapped[a] = 1;
      }
    }
    if (dd[nn - 1] == 0.0) dd[nn - 1] = tiny;
    x.assign(start.begin(), start.end());
    for (int iteration = 0; iteration < 2; ++iteration) {
      for (std::size_t a = 0; a + 1 < nn; ++a) {
        const std::size_t b = a + 1;
        if (swapped[a]) {
          const double upper = x[a];
          x[a] = x[b];
          x[b] = upper - dl[a] * x[a];
        } else {
          x[b] -= dl[a] * x[a];
        }
      }
      for (std::size_t a = nn; a-- > 0;) {
        double v = x[a];
        if (a + 1 < nn) v -= du[a] * x[a + 1];
        if (a + 2 < nn) v -= du2[a] * x[a + 2];
        x[a] = v * (1.0 / dd[a]);
      }
      ii::subtract_projections(vectors, r, n, x.data());
      ii::normalize_or_unit(x.data(), n, r);
    }
    std::copy(x.begin(), x.end(), vectors + r * n);
  }
}
}  // namespace scalar

}  // namespace veloxquant::eviction
#endif  // HWY_ONCE
