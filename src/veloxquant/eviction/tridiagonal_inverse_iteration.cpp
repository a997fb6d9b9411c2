// Highway kernel for tridiagonal_inverse_iteration.h, compiled once per target and dispatched at
// run time; the scalar reference at the end (one eigenvalue after the other within each stage) is
// what the SIMD path must reproduce bit for bit.
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
// What the SIMD path's one-lane-at-a-time normalisation and the scalar reference both use.
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

// y (n rows of stride) = (T - lambda I)^-1 start for B blocks of lanes from column c on (start
// null: y's own lanes, in place): the forward pass with the factorisation's swaps as blends, then
// the back substitution.
template <int B, class D>
HWY_INLINE void SolveLanes(D d, const LaneFactors& f, int64_t n, const double* start, int64_t c, double* y) {
  using V = hn::Vec<D>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t stride = f.stride;
  const V zero = hn::Zero(d);
  V carried[B];  // x[i + 1] after the eliminations so far
  for (int b = 0; b < B; ++b) carried[b] = start ? hn::Set(d, start[0]) : hn::LoadU(d, y + c + b * lanes);
  for (int64_t i = 0; i + 1 < n; ++i) {
    for (int b = 0; b < B; ++b) {
      const int64_t at = i * stride + c + b * lanes;
      const V next = start ? hn::Set(d, start[i + 1]) : hn::LoadU(d, y + at + stride);
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
HWY_INLINE void SubtractProjectionLanes(D d, const double* p, int64_t n, int64_t stride, int64_t c, int64_t first,
                                        double* y) {
  using V = hn::Vec<D>;
  // Lanes before `first` (global lane index) are kept as they are.
  const auto keep = hn::FirstN(d, static_cast<std::size_t>(std::max<int64_t>(0, first - c)));
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
    hn::BlendedStore(hn::Sub(hn::LoadU(d, x), hn::Mul(dot, hn::Set(d, p[i]))), hn::Not(keep), d, x);
  }
}

// Modified Gram-Schmidt over lanes 0..k-1 of y in order: lane r normalised (one lane, as the
// scalar reference does it), then its projection taken off every later lane at once.
template <class D>
HWY_INLINE void OrthonormalizeLanes(D d, int64_t n, int64_t k, int64_t stride, double* y, double* x) {
  namespace ii = ::veloxquant::eviction::inverse_iteration;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t r = 0; r < k; ++r) {
    for (int64_t i = 0; i < n; ++i) x[i] = y[i * stride + r];
    ii::normalize_or_unit(x, n, r);
    for (int64_t i = 0; i < n; ++i) y[i * stride + r] = x[i];
    for (int64_t block = (r + 1) / lanes * lanes; r + 1 < k && block < stride; block += lanes)
      SubtractProjectionLanes(d, x, n, stride, block, r + 1, y);
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
  OrthonormalizeLanes(d, n, k, stride, y.data(), x.data());
  for (c = 0; c + 2 * lanes <= stride; c += 2 * lanes) SolveLanes<2>(d, f, n, nullptr, c, y.data());
  for (; c < stride; c += lanes) SolveLanes<1>(d, f, n, nullptr, c, y.data());
  OrthonormalizeLanes(d, n, k, stride, y.data(), x.data());
  for (int64_t r = 0; r < k; ++r) {
    for (int64_t i = 0; i < n; ++i) vectors[r * n + i] = y[static_cast<std::size_t>(i * stride + r)];
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
namespace {
// Modified Gram-Schmidt over the rows of x (k x n) in order.
void orthonormalize(double* x, int64_t k, int64_t n) {
  namespace ii = inverse_iteration;
  for (int64_t r = 0; r < k; ++r) {
    double* p = x + r * n;
    ii::normalize_or_unit(p, n, r);
    for (int64_t s = r + 1; s < k; ++s) {
      double* y = x + s * n;
      const double dot = ii::split_dot(p, y, n);
      for (int64_t i = 0; i < n; ++i) y[i] -= dot * p[i];
    }
  }
}
}  // namespace

// Every eigenvalue's factorisation and solve from the start, the k results orthonormalised, solved
// again and orthonormalised again.
void tridiagonal_inverse_iteration(const double* d, const double* e, int64_t n, const double* lambdas, int64_t k,
                                   double* vectors) {
  namespace ii = inverse_iteration;
  if (k <= 0 || n <= 0) return;
  const std::size_t nn = static_cast<std::size_t>(n);
  const double tiny = ii::pivot_floor(d, e, n);
  const std::vector<double>& start = ii::start_vector(n);
  struct Factors {
    std::vector<double> dd, dl, du, du2;
    std::vector<char> swapped;
  };
  std::vector<Factors> factors(static_cast<std::size_t>(k));
  for (int64_t r = 0; r < k; ++r) {
    Factors& f = factors[static_cast<std::size_t>(r)];
    std::vector<double>&dd = f.dd, &dl = f.dl, &du = f.du, &du2 = f.du2;
    dd.assign(nn, 0.0);
    dl.assign(nn, 0.0);
    du.assign(nn, 0.0);
    du2.assign(nn, 0.0);
    f.swapped.assign(nn, 0);
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
        f.swapped[a] = 1;
      }
    }
    if (dd[nn - 1] == 0.0) dd[nn - 1] = tiny;
    std::copy(start.begin(), start.end(), vectors + r * n);
  }
  for (int iteration = 0; iteration < 2; ++iteration) {
    for (int64_t r = 0; r < k; ++r) {
      const Factors& f = factors[static_cast<std::size_t>(r)];
      double* x = vectors + r * n;
      for (std::size_t a = 0; a + 1 < nn; ++a) {
        const std::size_t b = a + 1;
        if (f.swapped[a]) {
          const double upper = x[a];
          x[a] = x[b];
          x[b] = upper - f.dl[a] * x[a];
        } else {
          x[b] -= f.dl[a] * x[a];
        }
      }
      for (std::size_t a = nn; a-- > 0;) {
        double v = x[a];
        if (a + 1 < nn) v -= f.du[a] * x[a + 1];
        if (a + 2 < nn) v -= f.du2[a] * x[a + 2];
        x[a] = v * (1.0 / f.dd[a]);
      }
    }
    orthonormalize(vectors, k, n);
  }
}
}  // namespace scalar

}  // namespace veloxquant::eviction
#endif  // HWY_ONCE
