// Highway kernel for upper_gram.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/eviction/upper_gram.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "veloxquant/eviction/fused_term-inl.h"

#include <algorithm>
#include <cmath>

#include "veloxquant/eviction/upper_gram.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::eviction::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

HWY_INLINE double scalar_term(double a, double b, double acc) {
#if HWY_NATIVE_FMA
  return std::fma(a, b, acc);
#else
  return acc + a * b;
#endif
}

// Rows [r0, r0 + R) x vectors [c, c + V * lanes) of G held in registers while every row of the
// block streams by: each entry still sums its terms over j in order onto its starting value,
// as the scalar loop does, but G is loaded and stored once per tile instead of once per row j.
template <int R, int V, class D>
HWY_INLINE void gram_tile(D d, const double* rows, int64_t count, int64_t dim, int64_t r0, int64_t c, double* gram) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<D> acc[R][V];
  for (int rr = 0; rr < R; ++rr) {
    for (int v = 0; v < V; ++v) acc[rr][v] = hn::LoadU(d, gram + (r0 + rr) * dim + c + v * lanes);
  }
  for (int64_t j = 0; j < count; ++j) {
    const double* m = rows + j * dim;
    hn::Vec<D> mc[V];
    for (int v = 0; v < V; ++v) mc[v] = hn::LoadU(d, m + c + v * lanes);
    for (int rr = 0; rr < R; ++rr) {
      const auto mr = hn::Set(d, m[r0 + rr]);
      for (int v = 0; v < V; ++v) acc[rr][v] = fused_term(mr, mc[v], acc[rr][v]);
    }
  }
  for (int rr = 0; rr < R; ++rr) {
    for (int v = 0; v < V; ++v) hn::StoreU(acc[rr][v], d, gram + (r0 + rr) * dim + c + v * lanes);
  }
}

// The columns of rows [r0, r0 + R) from the vector boundary at or below r0 on, in tiles of two
// vectors, then one, then the scalar tail. Entries left of the diagonal inside a tile are
// written too (callers overwrite the lower triangle).
template <int R, class D>
HWY_INLINE void gram_rows(D d, const double* rows, int64_t count, int64_t dim, int64_t r0, double* gram) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t c = r0 - r0 % lanes;
  for (; c + 2 * lanes <= dim; c += 2 * lanes) gram_tile<R, 2>(d, rows, count, dim, r0, c, gram);
  for (; c + lanes <= dim; c += lanes) gram_tile<R, 1>(d, rows, count, dim, r0, c, gram);
  for (int64_t r = r0; r < r0 + R; ++r) {
    for (int64_t cc = std::max(c, r); cc < dim; ++cc) {
      double g = gram[r * dim + cc];
      for (int64_t j = 0; j < count; ++j) g = scalar_term(rows[j * dim + r], rows[j * dim + cc], g);
      gram[r * dim + cc] = g;
    }
  }
}

void AccumulateUpperGramImpl(const double* rows, int64_t count, int64_t dim, double* gram) {
  const hn::ScalableTag<double> d;
  constexpr int64_t kTileRows = 8;
  int64_t r0 = 0;
  for (; r0 + kTileRows <= dim; r0 += kTileRows) gram_rows<kTileRows>(d, rows, count, dim, r0, gram);
  for (; r0 < dim; ++r0) gram_rows<1>(d, rows, count, dim, r0, gram);
}

bool GramFusesImpl() { return HWY_NATIVE_FMA != 0; }

}  // namespace veloxquant::eviction::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::eviction {
HWY_EXPORT(AccumulateUpperGramImpl);
HWY_EXPORT(GramFusesImpl);

bool upper_gram_fuses() { return HWY_DYNAMIC_DISPATCH(GramFusesImpl)(); }

void accumulate_upper_gram(const double* rows, int64_t count, int64_t dim, double* gram) {
  HWY_DYNAMIC_DISPATCH(AccumulateUpperGramImpl)(rows, count, dim, gram);
}

namespace scalar {
void accumulate_upper_gram(const double* rows, int64_t count, int64_t dim, double* gram) {
  for (int64_t j = 0; j < count; ++j) {
    const double* m = rows + j * dim;
    for (int64_t r = 0; r < dim; ++r) {
      const double mr = m[r];
      double* g = gram + r * dim;
      for (int64_t c = r; c < dim; ++c) g[c] += mr * m[c];
    }
  }
}
void accumulate_upper_gram_fused(const double* rows, int64_t count, int64_t dim, double* gram) {
  for (int64_t j = 0; j < count; ++j) {
    const double* m = rows + j * dim;
    for (int64_t r = 0; r < dim; ++r) {
      const double mr = m[r];
      double* g = gram + r * dim;
      for (int64_t c = r; c < dim; ++c) g[c] = std::fma(mr, m[c], g[c]);
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::eviction
#endif  // HWY_ONCE
