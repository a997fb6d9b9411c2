// Highway kernels for leverage_kernels.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/eviction/leverage_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <vector>

#include "veloxquant/eviction/leverage_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::eviction::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void SubspaceEnergyImpl(const double* rows, int64_t count, int64_t dim, const double* vectors, int64_t k,
                        double* energy) {
  const hn::ScalableTag<double> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t padded = (k + lanes - 1) / lanes * lanes;
  // The vectors transposed (dim x padded, zero past k): lane t of a column load is vector t's
  // component i. This thread's buffers, reused: curdkv calls this at every decode step.
  thread_local std::vector<double> columns, dots;
  columns.assign(static_cast<std::size_t>(dim * padded), 0.0);
  dots.resize(static_cast<std::size_t>(padded));
  for (int64_t t = 0; t < k; ++t) {
    for (int64_t i = 0; i < dim; ++i) columns[static_cast<std::size_t>(i * padded + t)] = vectors[t * dim + i];
  }
  for (int64_t j = 0; j < count; ++j) {
    const double* m = rows + j * dim;
    for (int64_t t0 = 0; t0 < padded; t0 += lanes) {
      auto dot = hn::Zero(d);
      for (int64_t i = 0; i < dim; ++i) {
        dot = hn::Add(dot, hn::Mul(hn::Set(d, m[i]), hn::LoadU(d, columns.data() + i * padded + t0)));
      }
      hn::StoreU(dot, d, dots.data() + t0);
    }
    double sum = 0.0;
    for (int64_t t = 0; t < k; ++t) sum += dots[static_cast<std::size_t>(t)] * dots[static_cast<std::size_t>(t)];
    energy[j] = sum;
  }
}

void SymmetricTimesVectorImpl(const double* a, int64_t n, int64_t from, const double* v, double* p) {
  const hn::ScalableTag<double> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  std::fill(p + from, p + n, 0.0);
  // p[i] += a[j][i] * v[j] for j ascending: a[j][i] is a[i][j], so each p[i] sums its row's terms
  // in column order, as the scalar loop does.
  for (int64_t j = from; j < n; ++j) {
    const double* row = a + j * n;
    const auto vj = hn::Set(d, v[j]);
    int64_t i = from;
    for (; i + lanes <= n; i += lanes)
      hn::StoreU(hn::Add(hn::LoadU(d, p + i), hn::Mul(hn::LoadU(d, row + i), vj)), d, p + i);
    for (; i < n; ++i) p[i] += row[i] * v[j];
  }
}

void SymmetricRank2UpdateImpl(double* a, int64_t n, int64_t from, const double* v, const double* w) {
  const hn::ScalableTag<double> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t i = from; i < n; ++i) {
    double* row = a + i * n;
    const auto vi = hn::Set(d, v[i]), wi = hn::Set(d, w[i]);
    int64_t j = from;
    for (; j + lanes <= n; j += lanes) {
      const auto update = hn::Add(hn::Mul(vi, hn::LoadU(d, w + j)), hn::Mul(wi, hn::LoadU(d, v + j)));
      hn::StoreU(hn::Sub(hn::LoadU(d, row + j), update), d, row + j);
    }
    for (; j < n; ++j) row[j] -= v[i] * w[j] + w[i] * v[j];
  }
}

}  // namespace veloxquant::eviction::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::eviction {
HWY_EXPORT(SubspaceEnergyImpl);
HWY_EXPORT(SymmetricTimesVectorImpl);
HWY_EXPORT(SymmetricRank2UpdateImpl);

void subspace_energy(const double* rows, int64_t count, int64_t dim, const double* vectors, int64_t k, double* energy) {
  HWY_DYNAMIC_DISPATCH(SubspaceEnergyImpl)(rows, count, dim, vectors, k, energy);
}
void symmetric_times_vector(const double* a, int64_t n, int64_t from, const double* v, double* p) {
  HWY_DYNAMIC_DISPATCH(SymmetricTimesVectorImpl)(a, n, from, v, p);
}
void symmetric_rank2_update(double* a, int64_t n, int64_t from, const double* v, const double* w) {
  HWY_DYNAMIC_DISPATCH(SymmetricRank2UpdateImpl)(a, n, from, v, w);
}

namespace scalar {
void subspace_energy(const double* rows, int64_t count, int64_t dim, const double* vectors, int64_t k, double* energy) {
  for (int64_t j = 0; j < count; ++j) {
    const double* m = rows + j * dim;
    double sum = 0.0;
    for (int64_t t = 0; t < k; ++t) {
      const double* u = vectors + t * dim;
      double dot = 0.0;
      for (int64_t i = 0; i < dim; ++i) dot += m[i] * u[i];
      sum += dot * dot;
    }
    energy[j] = sum;
  }
}
void symmetric_times_vector(const double* a, int64_t n, int64_t from, const double* v, double* p) {
  for (int64_t i = from; i < n; ++i) {
    double sum = 0.0;
    for (int64_t j = from; j < n; ++j) sum += a[i * n + j] * v[j];
    p[i] = sum;
  }
}
void symmetric_rank2_update(double* a, int64_t n, int64_t from, const double* v, const double* w) {
  for (int64_t i = from; i < n; ++i) {
    for (int64_t j = from; j < n; ++j) a[i * n + j] -= v[i] * w[j] + w[i] * v[j];
  }
}
}  // namespace scalar

}  // namespace veloxquant::eviction
#endif  // HWY_ONCE
