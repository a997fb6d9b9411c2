// Highway kernels for leverage_kernels.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/eviction/leverage_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "veloxquant/eviction/fused_term-inl.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "veloxquant/eviction/leverage_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::eviction::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One row's k dot products (lanes across the transposed vectors), R rows at a time: the R * V
// accumulator chains are independent, so the adds overlap instead of waiting on each other's
// latency (one row's 64-term chain alone was latency-bound). Each dot is still its row's sum
// over i in order.
template <int R, int V, class D>
HWY_INLINE void row_dots(D d, const double* rows, int64_t dim, const double* columns, int64_t padded, int64_t t0,
                         double* dots) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<D> acc[R][V];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) acc[r][v] = hn::Zero(d);
  }
  for (int64_t i = 0; i < dim; ++i) {
    hn::Vec<D> col[V];
    for (int v = 0; v < V; ++v) col[v] = hn::LoadU(d, columns + i * padded + t0 + v * lanes);
    for (int r = 0; r < R; ++r) {
      const auto m = hn::Set(d, rows[r * dim + i]);
      for (int v = 0; v < V; ++v) acc[r][v] = fused_term(m, col[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) hn::StoreU(acc[r][v], d, dots + r * padded + t0 + v * lanes);
  }
}

void SubspaceEnergyImpl(const double* rows, int64_t count, int64_t dim, const double* vectors, int64_t k,
                        double* energy) {
  const hn::ScalableTag<double> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t padded = (k + lanes - 1) / lanes * lanes;
  constexpr int64_t kRows = 4;
  // The vectors transposed (dim x padded, zero past k): lane t of a column load is vector t's
  // component i. This thread's buffers, reused: curdkv calls this at every decode step.
  thread_local std::vector<double> columns, dots;
  columns.assign(static_cast<std::size_t>(dim * padded), 0.0);
  dots.resize(static_cast<std::size_t>(kRows * padded));
  for (int64_t t = 0; t < k; ++t) {
    for (int64_t i = 0; i < dim; ++i) columns[static_cast<std::size_t>(i * padded + t)] = vectors[t * dim + i];
  }
  for (int64_t j = 0; j < count; j += kRows) {
    const int64_t r = std::min(kRows, count - j);
    const double* m = rows + j * dim;
    for (int64_t t0 = 0; t0 < padded;) {
      if (r == kRows && t0 + 2 * lanes <= padded) {
        row_dots<kRows, 2>(d, m, dim, columns.data(), padded, t0, dots.data());
        t0 += 2 * lanes;
      } else if (r == kRows) {
        row_dots<kRows, 1>(d, m, dim, columns.data(), padded, t0, dots.data());
        t0 += lanes;
      } else {  // the last rows of a count not a multiple of kRows
        for (int64_t rr = 0; rr < r; ++rr)
          row_dots<1, 1>(d, m + rr * dim, dim, columns.data(), padded, t0, dots.data() + rr * padded);
        t0 += lanes;
      }
    }
    for (int64_t rr = 0; rr < r; ++rr) {
      const double* dot = dots.data() + rr * padded;
      double sum = 0.0;
      for (int64_t t = 0; t < k; ++t) sum += dot[t] * dot[t];
      energy[j + rr] = sum;
    }
  }
}

// p over the V vectors from i0 on, held in registers while every row j of B streams by (in
// memory, each vector of p was a load, an add and a store per row: a store-to-load chain).
template <int V, class D>
HWY_INLINE void times_vector_block(D d, const double* a, int64_t n, int64_t from, const double* v, int64_t i0,
                                   double* p) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<D> acc[V];
  for (int b = 0; b < V; ++b) acc[b] = hn::Zero(d);
  for (int64_t j = from; j < n; ++j) {
    const double* row = a + j * n + i0;
    const auto vj = hn::Set(d, v[j]);
    for (int b = 0; b < V; ++b) acc[b] = hn::Add(acc[b], hn::Mul(hn::LoadU(d, row + b * lanes), vj));
  }
  for (int b = 0; b < V; ++b) hn::StoreU(acc[b], d, p + i0 + b * lanes);
}

void SymmetricTimesVectorImpl(const double* a, int64_t n, int64_t from, const double* v, double* p) {
  const hn::ScalableTag<double> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  // p[i] = sum over j ascending of a[j][i] * v[j]: a[j][i] is a[i][j], so each p[i] sums its row's
  // terms in column order, as the scalar loop does.
  if (n - from < lanes) {
    for (int64_t i = from; i < n; ++i) {
      double sum = 0.0;
      for (int64_t j = from; j < n; ++j) sum += a[j * n + i] * v[j];
      p[i] = sum;
    }
    return;
  }
  int64_t i = from;
  for (; i + 4 * lanes <= n; i += 4 * lanes) times_vector_block<4>(d, a, n, from, v, i, p);
  for (; i + 2 * lanes <= n; i += 2 * lanes) times_vector_block<2>(d, a, n, from, v, i, p);
  for (; i + lanes <= n; i += lanes) times_vector_block<1>(d, a, n, from, v, i, p);
  // The rest as the vector ending at n: its first lanes get the same sums again.
  if (i < n) times_vector_block<1>(d, a, n, from, v, n - lanes, p);
}

// What one rank2_update_rows call works on.
struct Rank2Rows {
  double* a;
  int64_t n, row_begin, row_end;
  const double *v, *w, *next_v;
};

// One group of up to kMaxChunks column chunks (starts[c], each lanes wide, stores masked by
// store[c]) of the rows: the rank-2 update, and with next_v the running sums
// p[j] += (updated a[i][j]) next_v[i] in registers while the rows stream by.
template <int V, class D, class M>
HWY_INLINE void Rank2UpdateChunks(D d, const Rank2Rows& job, const int64_t* starts, const M* store, hn::Vec<D>* sums) {
  hn::Vec<D> wc[V], vc[V], acc[V];
  for (int c = 0; c < V; ++c) {
    wc[c] = hn::LoadU(d, job.w + starts[c]);
    vc[c] = hn::LoadU(d, job.v + starts[c]);
    acc[c] = hn::Zero(d);
  }
  for (int64_t i = job.row_begin; i < job.row_end; ++i) {
    double* row = job.a + i * job.n;
    const auto vi = hn::Set(d, job.v[i]), wi = hn::Set(d, job.w[i]);
    const auto ni = hn::Set(d, job.next_v ? job.next_v[i] : 0.0);
    for (int c = 0; c < V; ++c) {
      const auto x = hn::Sub(hn::LoadU(d, row + starts[c]), hn::Add(hn::Mul(vi, wc[c]), hn::Mul(wi, vc[c])));
      hn::BlendedStore(x, store[c], d, row + starts[c]);
      if (job.next_v) acc[c] = hn::Add(acc[c], hn::Mul(x, ni));
    }
  }
  for (int c = 0; c < V; ++c) sums[c] = acc[c];
}

void Rank2UpdateRowsImpl(double* a, int64_t n, int64_t row_begin, int64_t row_end, int64_t col_begin, const double* v,
                         const double* w, const double* next_v, double* p) {
  const hn::ScalableTag<double> d;
  using M = hn::Mask<decltype(d)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  if (n - col_begin <= 0 || row_end <= row_begin) return;
  if (n < lanes) {  // narrower than a vector: the scalar loop
    scalar::rank2_update_rows(a, n, row_begin, row_end, col_begin, v, w, next_v, p);
    return;
  }
  const Rank2Rows job{a, n, row_begin, row_end, v, w, next_v};
  // Chunks on lane-aligned columns from col_begin rounded down (the lanes before col_begin are
  // computed, not stored), the last one ending at n (its lanes that an earlier chunk stored are not
  // stored again: they would be updated twice). No load leaves the row.
  constexpr int kMaxChunks = 4;
  const int64_t first = col_begin / lanes * lanes;
  for (int64_t group = first; group < n; group += kMaxChunks * lanes) {
    int64_t starts[kMaxChunks];
    M store[kMaxChunks];
    int chunks = 0;
    for (int64_t c = group; c < n && chunks < kMaxChunks; c += lanes, ++chunks) {
      const int64_t start = std::min(c, n - lanes);
      const int64_t skip = std::max(col_begin, c) - start;  // leading lanes not this chunk's to store
      starts[chunks] = start;
      store[chunks] = hn::Not(hn::FirstN(d, static_cast<std::size_t>(skip)));
    }
    hn::Vec<decltype(d)> sums[kMaxChunks];
    switch (chunks) {
      case 4:
        Rank2UpdateChunks<4>(d, job, starts, store, sums);
        break;
      case 3:
        Rank2UpdateChunks<3>(d, job, starts, store, sums);
        break;
      case 2:
        Rank2UpdateChunks<2>(d, job, starts, store, sums);
        break;
      default:
        Rank2UpdateChunks<1>(d, job, starts, store, sums);
        break;
    }
    if (next_v) {
      for (int c = 0; c < chunks; ++c) hn::BlendedStore(sums[c], store[c], d, p + starts[c]);
    }
  }
}

// One reflector applied to V vectors of columns from c on: the V dot products summed side by side
// (V independent add chains: one vector's 60-term chain alone left the core waiting on each add's
// latency), then the update.
template <int V, class D>
HWY_INLINE void ReflectBlock(D d, const double* v, int64_t from, int64_t n, double* columns, int64_t stride,
                             int64_t c) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<D> dot[V];
  for (int b = 0; b < V; ++b) dot[b] = hn::Zero(d);
  for (int64_t i = from; i < n; ++i) {
    const auto vi = hn::Set(d, v[i]);
    for (int b = 0; b < V; ++b)
      dot[b] = hn::Add(dot[b], hn::Mul(vi, hn::LoadU(d, columns + i * stride + c + b * lanes)));
  }
  const auto two = hn::Set(d, 2.0);
  for (int b = 0; b < V; ++b) dot[b] = hn::Mul(two, dot[b]);
  for (int64_t i = from; i < n; ++i) {
    const auto vi = hn::Set(d, v[i]);
    for (int b = 0; b < V; ++b) {
      double* x = columns + i * stride + c + b * lanes;
      hn::StoreU(hn::Sub(hn::LoadU(d, x), hn::Mul(dot[b], vi)), d, x);
    }
  }
}

void ReflectColumnsImpl(const double* reflectors, const char* has_reflector, int64_t n, double* columns, int64_t stride,
                        int64_t count) {
  // At most 4 lanes a vector (256 bits on AVX3): curdkv's 16 vectors then make 4 dot chains per
  // reflector instead of 2, the same operations on every lane.
  const hn::CappedTag<double, 4> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t used = std::min(stride, (count + lanes - 1) / lanes * lanes);
  for (int64_t r = n - 3; r >= 0; --r) {
    if (!has_reflector[r]) continue;
    const double* v = reflectors + r * n;
    int64_t c = 0;
    for (; c + 4 * lanes <= used; c += 4 * lanes) ReflectBlock<4>(d, v, r + 1, n, columns, stride, c);
    if (c + 2 * lanes <= used) {
      ReflectBlock<2>(d, v, r + 1, n, columns, stride, c);
      c += 2 * lanes;
    }
    if (c < used) ReflectBlock<1>(d, v, r + 1, n, columns, stride, c);
  }
}

bool WeightedRowsImpl(const float* values, const int32_t* rows, int64_t count, int64_t dim, const float* weights,
                      double* out) {
  const hn::ScalableTag<double> d;
  const hn::Rebind<float, decltype(d)> f;  // as many floats as d has doubles
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto zero = hn::Zero(d);
  auto any = hn::FirstN(d, 0);
  bool nonzero = false;
  for (int64_t j = 0; j < count; ++j) {
    const float* v = values + (rows ? rows[j] : j) * dim;
    double* m = out + j * dim;
    const double w = double(weights[j]);
    const auto wv = hn::Set(d, w);
    int64_t i = 0;
    for (; i + lanes <= dim; i += lanes) {
      const auto x = hn::Mul(wv, hn::PromoteTo(d, hn::LoadU(f, v + i)));
      hn::StoreU(x, d, m + i);
      any = hn::Or(any, hn::Ne(hn::Mul(x, x), zero));
    }
    for (; i < dim; ++i) {
      m[i] = w * v[i];
      nonzero |= m[i] * m[i] != 0.0;
    }
  }
  return nonzero || !hn::AllFalse(d, any);
}

bool SubspaceEnergyFusesImpl() { return HWY_NATIVE_FMA != 0; }

int64_t VectorLanesImpl() { return static_cast<int64_t>(hn::Lanes(hn::ScalableTag<double>())); }

}  // namespace veloxquant::eviction::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::eviction {
HWY_EXPORT(SubspaceEnergyImpl);
HWY_EXPORT(SubspaceEnergyFusesImpl);
HWY_EXPORT(SymmetricTimesVectorImpl);
HWY_EXPORT(Rank2UpdateRowsImpl);
HWY_EXPORT(ReflectColumnsImpl);
HWY_EXPORT(VectorLanesImpl);
HWY_EXPORT(WeightedRowsImpl);

bool weighted_rows(const float* values, const int32_t* rows, int64_t count, int64_t dim, const float* weights,
                   double* out) {
  return HWY_DYNAMIC_DISPATCH(WeightedRowsImpl)(values, rows, count, dim, weights, out);
}

void reflect_columns(const double* reflectors, const char* has_reflector, int64_t n, double* columns, int64_t stride,
                     int64_t count) {
  HWY_DYNAMIC_DISPATCH(ReflectColumnsImpl)(reflectors, has_reflector, n, columns, stride, count);
}
int64_t vector_lanes() { return HWY_DYNAMIC_DISPATCH(VectorLanesImpl)(); }

void subspace_energy(const double* rows, int64_t count, int64_t dim, const double* vectors, int64_t k, double* energy) {
  HWY_DYNAMIC_DISPATCH(SubspaceEnergyImpl)(rows, count, dim, vectors, k, energy);
}
bool subspace_energy_fuses() { return HWY_DYNAMIC_DISPATCH(SubspaceEnergyFusesImpl)(); }
void symmetric_times_vector(const double* a, int64_t n, int64_t from, const double* v, double* p) {
  HWY_DYNAMIC_DISPATCH(SymmetricTimesVectorImpl)(a, n, from, v, p);
}
void rank2_update_rows(double* a, int64_t n, int64_t row_begin, int64_t row_end, int64_t col_begin, const double* v,
                       const double* w, const double* next_v, double* p) {
  HWY_DYNAMIC_DISPATCH(Rank2UpdateRowsImpl)(a, n, row_begin, row_end, col_begin, v, w, next_v, p);
}

namespace scalar {
bool weighted_rows(const float* values, const int32_t* rows, int64_t count, int64_t dim, const float* weights,
                   double* out) {
  bool nonzero = false;
  for (int64_t j = 0; j < count; ++j) {
    const float* v = values + (rows ? rows[j] : j) * dim;
    double* m = out + j * dim;
    for (int64_t i = 0; i < dim; ++i) {
      m[i] = double(weights[j]) * v[i];
      nonzero |= m[i] * m[i] != 0.0;
    }
  }
  return nonzero;
}
void reflect_columns(const double* reflectors, const char* has_reflector, int64_t n, double* columns, int64_t stride,
                     int64_t count) {
  for (int64_t r = n - 3; r >= 0; --r) {
    if (!has_reflector[r]) continue;
    const double* v = reflectors + r * n;
    for (int64_t c = 0; c < count; ++c) {
      double dot = 0.0;
      for (int64_t i = r + 1; i < n; ++i) dot += v[i] * columns[i * stride + c];
      const double scaled = 2.0 * dot;
      for (int64_t i = r + 1; i < n; ++i) columns[i * stride + c] -= scaled * v[i];
    }
  }
}
// The two references differ only in how a dot product's term is added: multiply then add (this
// file is built with -ffp-contract=off) or one fused multiply-add.
template <bool kFused>
void subspace_energy_reference(const double* rows, int64_t count, int64_t dim, const double* vectors, int64_t k,
                               double* energy) {
  for (int64_t j = 0; j < count; ++j) {
    const double* m = rows + j * dim;
    double sum = 0.0;
    for (int64_t t = 0; t < k; ++t) {
      const double* u = vectors + t * dim;
      double dot = 0.0;
      for (int64_t i = 0; i < dim; ++i) dot = kFused ? std::fma(m[i], u[i], dot) : dot + m[i] * u[i];
      sum += dot * dot;
    }
    energy[j] = sum;
  }
}
void subspace_energy(const double* rows, int64_t count, int64_t dim, const double* vectors, int64_t k, double* energy) {
  subspace_energy_reference<false>(rows, count, dim, vectors, k, energy);
}
void subspace_energy_fused(const double* rows, int64_t count, int64_t dim, const double* vectors, int64_t k,
                           double* energy) {
  subspace_energy_reference<true>(rows, count, dim, vectors, k, energy);
}
void symmetric_times_vector(const double* a, int64_t n, int64_t from, const double* v, double* p) {
  for (int64_t i = from; i < n; ++i) {
    double sum = 0.0;
    for (int64_t j = from; j < n; ++j) sum += a[i * n + j] * v[j];
    p[i] = sum;
  }
}
void rank2_update_rows(double* a, int64_t n, int64_t row_begin, int64_t row_end, int64_t col_begin, const double* v,
                       const double* w, const double* next_v, double* p) {
  for (int64_t i = row_begin; i < row_end; ++i) {
    for (int64_t j = col_begin; j < n; ++j) a[i * n + j] -= v[i] * w[j] + w[i] * v[j];
  }
  if (!next_v) return;
  for (int64_t j = col_begin; j < n; ++j) {
    double sum = 0.0;
    for (int64_t i = row_begin; i < row_end; ++i) sum += a[i * n + j] * next_v[i];
    p[j] = sum;
  }
}
}  // namespace scalar

}  // namespace veloxquant::eviction
#endif  // HWY_ONCE
