// Highway kernels for ordered_sums.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/eviction/ordered_sums.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cstddef>

#include "veloxquant/eviction/ordered_sums.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::eviction::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DD = hn::ScalableTag<double>;
using VD = hn::Vec<DD>;

// Row blocks transposed in registers: fixed-size vectors of at least two lanes (the scalar
// and scalable targets take the plain loops).
#undef VQ_ROW_BLOCKS  // this file is compiled once per target
#if !HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR
#define VQ_ROW_BLOCKS 1
#else
#define VQ_ROW_BLOCKS 0
#endif

#if VQ_ROW_BLOCKS
// The lanes x lanes block v[0..lanes) transposed in registers (a row per vector in, a column
// per vector out): log2(lanes) rounds of deinterleaving the block read as one flat sequence,
// each rotating the bits of a flat index (row, column) by one, so that they end (column, row).
// Only moves values: no arithmetic.
constexpr std::size_t kLanes = hn::MaxLanes(DD());

HWY_INLINE void TransposeBlock(VD* v) {
  const DD d;
  VD t[kLanes];
  for (std::size_t round = 1; round < kLanes; round *= 2) {
    for (std::size_t k = 0; k < kLanes / 2; ++k) {
      t[k] = hn::ConcatEven(d, v[2 * k + 1], v[2 * k]);
      t[kLanes / 2 + k] = hn::ConcatOdd(d, v[2 * k + 1], v[2 * k]);
    }
    for (std::size_t k = 0; k < kLanes; ++k) v[k] = t[k];
  }
}

// Loads elements [e, e + lanes) of `lanes` rows (each widened to double) as a row block.
HWY_INLINE void LoadRowBlock(const float* const* rows, int64_t e, VD* v) {
  const DD d;
  const hn::Rebind<float, DD> df;
  for (std::size_t r = 0; r < kLanes; ++r) v[r] = hn::PromoteTo(d, hn::LoadU(df, rows[r] + e));
}
HWY_INLINE void LoadRowBlock(const double* const* rows, int64_t e, VD* v) {
  const DD d;
  for (std::size_t r = 0; r < kLanes; ++r) v[r] = hn::LoadU(d, rows[r] + e);
}

// sum over e of row[e] * (v ? v[e] : 1), for kLanes rows at once (lane r = rows[r]): the
// columns come from transposed row blocks, every lane adds its row's terms in order of e.
template <class T>
HWY_INLINE VD RowBlockDots(const T* const* rows, int64_t dim, const float* v) {
  const DD d;
  VD block[kLanes];
  auto sum = hn::Zero(d);
  int64_t e = 0;
  for (; e + static_cast<int64_t>(kLanes) <= dim; e += static_cast<int64_t>(kLanes)) {
    LoadRowBlock(rows, e, block);
    TransposeBlock(block);
    for (std::size_t c = 0; c < kLanes; ++c) {
      sum = v ? hn::Add(sum, hn::Mul(block[c], hn::Set(d, static_cast<double>(v[e + static_cast<int64_t>(c)]))))
              : hn::Add(sum, block[c]);
    }
  }
  if (e == dim) return sum;
  // The last dim % lanes terms, lane by lane, after the others.
  double lanes_sum[kLanes];
  hn::StoreU(sum, d, lanes_sum);
  for (std::size_t r = 0; r < kLanes; ++r) {
    for (int64_t t = e; t < dim; ++t) lanes_sum[r] += v ? double(rows[r][t]) * v[t] : double(rows[r][t]);
  }
  return hn::LoadU(d, lanes_sum);
}
#endif

void IndexedRowDotsImpl(const float* rows, const int32_t* index, int64_t count, int64_t dim, const float* v,
                        double* out) {
  int64_t j = 0;
#if VQ_ROW_BLOCKS
  const DD d;
  const float* block[kLanes];
  for (; j + static_cast<int64_t>(kLanes) <= count; j += static_cast<int64_t>(kLanes)) {
    for (std::size_t r = 0; r < kLanes; ++r)
      block[r] = rows + static_cast<int64_t>(index[j + static_cast<int64_t>(r)]) * dim;
    hn::StoreU(RowBlockDots(block, dim, v), d, out + j);
  }
#endif
  for (; j < count; ++j) {
    const float* row = rows + static_cast<int64_t>(index[j]) * dim;
    double s = 0.0;
    for (int64_t e = 0; e < dim; ++e) s += double(row[e]) * v[e];
    out[j] = s;
  }
}

// nestedkv's keys as columns (stride apart; double(k), not yet unit) and each key's squared norm,
// summed along the key in order: the norms come out of the transposed blocks as they are stored.
void KeyColumnsAndNormsImpl(const float* keys, const int32_t* rows, int64_t count, int64_t dim, double* columns,
                            int64_t stride, double* norms) {
  int64_t i = 0;
#if VQ_ROW_BLOCKS
  const DD d;
  const int64_t lanes = static_cast<int64_t>(kLanes);
  const float* block_rows[kLanes];
  VD block[kLanes];
  double lane_norms[kLanes];
  for (; i + lanes <= count; i += lanes) {
    for (int64_t r = 0; r < lanes; ++r) block_rows[r] = keys + static_cast<int64_t>(rows ? rows[i + r] : i + r) * dim;
    auto norm = hn::Zero(d);
    int64_t e = 0;
    for (; e + lanes <= dim; e += lanes) {
      LoadRowBlock(block_rows, e, block);
      TransposeBlock(block);
      for (int64_t c = 0; c < lanes; ++c) {
        hn::StoreU(block[c], d, columns + (e + c) * stride + i);
        norm = hn::Add(norm, hn::Mul(block[c], block[c]));
      }
    }
    hn::StoreU(norm, d, lane_norms);
    for (int64_t r = 0; r < lanes; ++r) {
      for (int64_t t = e; t < dim; ++t) {
        const double x = block_rows[r][t];
        columns[t * stride + i + r] = x;
        lane_norms[r] += x * x;
      }
      norms[i + r] = lane_norms[r];
    }
  }
#endif
  for (; i < count; ++i) {
    const float* k = keys + static_cast<int64_t>(rows ? rows[i] : i) * dim;
    double s = 0.0;
    for (int64_t e = 0; e < dim; ++e) {
      const double x = k[e];
      columns[e * stride + i] = x;
      s += x * x;
    }
    norms[i] = s;
  }
}

// The unit keys u_i = double(k_i) * inv[i], one element per lane, summed over every key (total)
// and over each block of `block` keys (block_sums, a row of dim per block), in order of i.
void UnitSumsImpl(const float* keys, const int32_t* rows, int64_t count, int64_t dim, const double* inv, int64_t block,
                  double* total, double* block_sums) {
  const DD d;
  const hn::Rebind<float, DD> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t e = 0;
  for (; e + lanes <= dim; e += lanes) {
    auto t = hn::Zero(d);
    for (int64_t start = 0; start < count; start += block) {
      const int64_t end = std::min(start + block, count);
      auto s = hn::Zero(d);
      for (int64_t i = start; i < end; ++i) {
        const float* k = keys + static_cast<int64_t>(rows ? rows[i] : i) * dim;
        const auto u = hn::Mul(hn::PromoteTo(d, hn::LoadU(df, k + e)), hn::Set(d, inv[i]));
        t = hn::Add(t, u);
        s = hn::Add(s, u);
      }
      hn::StoreU(s, d, block_sums + (start / block) * dim + e);
    }
    hn::StoreU(t, d, total + e);
  }
  for (; e < dim; ++e) {
    double t = 0.0;
    for (int64_t start = 0; start < count; start += block) {
      const int64_t end = std::min(start + block, count);
      double s = 0.0;
      for (int64_t i = start; i < end; ++i) {
        const double u = keys[static_cast<int64_t>(rows ? rows[i] : i) * dim + e] * inv[i];
        t += u;
        s += u;
      }
      block_sums[(start / block) * dim + e] = s;
    }
    total[e] = t;
  }
}

// For keys [begin, end): out1[i] = sum over e of u_i[e] * v1[e], out2[i] likewise with v2, the
// unit element u_i[e] = columns[e * stride + i] * inv[i]; two blocks of keys at a time.
void UnitColumnDotsImpl(const double* columns, int64_t stride, const double* inv, int64_t begin, int64_t end,
                        int64_t dim, const double* v1, const double* v2, double* out1, double* out2) {
  const DD d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = begin;
  for (; i + 2 * lanes <= end; i += 2 * lanes) {
    const auto inv0 = hn::LoadU(d, inv + i), inv1 = hn::LoadU(d, inv + i + lanes);
    auto a0 = hn::Zero(d), a1 = hn::Zero(d), b0 = hn::Zero(d), b1 = hn::Zero(d);
    for (int64_t e = 0; e < dim; ++e) {
      const double* c = columns + e * stride + i;
      const auto u0 = hn::Mul(hn::LoadU(d, c), inv0), u1 = hn::Mul(hn::LoadU(d, c + lanes), inv1);
      const auto x = hn::Set(d, v1[e]), y = hn::Set(d, v2[e]);
      a0 = hn::Add(a0, hn::Mul(u0, x));
      a1 = hn::Add(a1, hn::Mul(u1, x));
      b0 = hn::Add(b0, hn::Mul(u0, y));
      b1 = hn::Add(b1, hn::Mul(u1, y));
    }
    hn::StoreU(a0, d, out1 + i);
    hn::StoreU(a1, d, out1 + i + lanes);
    hn::StoreU(b0, d, out2 + i);
    hn::StoreU(b1, d, out2 + i + lanes);
  }
  for (; i < end; ++i) {
    double a = 0.0, b = 0.0;
    for (int64_t e = 0; e < dim; ++e) {
      const double u = columns[e * stride + i] * inv[i];
      a += u * v1[e];
      b += u * v2[e];
    }
    out1[i] = a;
    out2[i] = b;
  }
}

// out[i] = sum over e of u_i[e] * (running[e] / min(i + 1, window)), running the sum of the
// window's unit keys kept as nestedkv kept it (add u_i, then subtract u_{i - window}). The terms
// of `lanes` keys go to `products` (lanes x dim scratch), then are summed key by key from
// transposed blocks.
void RecentAnomaliesImpl(const float* keys, const int32_t* rows, int64_t count, int64_t dim, const double* inv,
                         int64_t window, double* running, double* products, double* out) {
  const DD d;
  const hn::Rebind<float, DD> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto key = [&](int64_t i) { return keys + static_cast<int64_t>(rows ? rows[i] : i) * dim; };
  std::fill(running, running + dim, 0.0);
  // Row i's terms into products + slot * dim.
  const auto terms = [&](int64_t i, int64_t slot) {
    const float* k = key(i);
    const float* leaving = i >= window ? key(i - window) : nullptr;
    const int64_t n = std::min(i + 1, window);
    // Dividing by a power of two and multiplying by its (exact) reciprocal round the same
    // number: the default window divides only in its first rows.
    const bool power_of_two = (n & (n - 1)) == 0;
    const double divisor = double(n), reciprocal = 1.0 / double(n);
    const auto vi = hn::Set(d, inv[i]);
    double* p = products + slot * dim;
    int64_t e = 0;
    for (; e + lanes <= dim; e += lanes) {
      const auto u = hn::Mul(hn::PromoteTo(d, hn::LoadU(df, k + e)), vi);
      auto r = hn::Add(hn::LoadU(d, running + e), u);
      if (leaving) r = hn::Sub(r, hn::Mul(hn::PromoteTo(d, hn::LoadU(df, leaving + e)), hn::Set(d, inv[i - window])));
      hn::StoreU(r, d, running + e);
      const auto mean = power_of_two ? hn::Mul(r, hn::Set(d, reciprocal)) : hn::Div(r, hn::Set(d, divisor));
      hn::StoreU(hn::Mul(u, mean), d, p + e);
    }
    for (; e < dim; ++e) {
      const double u = k[e] * inv[i];
      running[e] += u;
      if (leaving) running[e] -= leaving[e] * inv[i - window];
      p[e] = u * (running[e] / divisor);
    }
  };
  int64_t i = 0;
#if VQ_ROW_BLOCKS
  const double* block[kLanes];
  for (int64_t r = 0; r < lanes; ++r) block[r] = products + r * dim;
  for (; i + lanes <= count; i += lanes) {
    for (int64_t r = 0; r < lanes; ++r) terms(i + r, r);
    hn::StoreU(RowBlockDots(block, dim, nullptr), d, out + i);
  }
#endif
  for (; i < count; ++i) {
    terms(i, 0);
    double s = 0.0;
    for (int64_t e = 0; e < dim; ++e) s += products[e];
    out[i] = s;
  }
}

}  // namespace veloxquant::eviction::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::eviction {
HWY_EXPORT(IndexedRowDotsImpl);
HWY_EXPORT(KeyColumnsAndNormsImpl);
HWY_EXPORT(UnitSumsImpl);
HWY_EXPORT(UnitColumnDotsImpl);
HWY_EXPORT(RecentAnomaliesImpl);

void indexed_row_dots(const float* rows, const int32_t* index, int64_t count, int64_t dim, const float* v,
                      double* out) {
  HWY_DYNAMIC_DISPATCH(IndexedRowDotsImpl)(rows, index, count, dim, v, out);
}
void key_columns_and_norms(const float* keys, const int32_t* rows, int64_t count, int64_t dim, double* columns,
                           int64_t stride, double* norms) {
  HWY_DYNAMIC_DISPATCH(KeyColumnsAndNormsImpl)(keys, rows, count, dim, columns, stride, norms);
}
void unit_sums(const float* keys, const int32_t* rows, int64_t count, int64_t dim, const double* inv, int64_t block,
               double* total, double* block_sums) {
  HWY_DYNAMIC_DISPATCH(UnitSumsImpl)(keys, rows, count, dim, inv, block, total, block_sums);
}
void unit_column_dots(const double* columns, int64_t stride, const double* inv, int64_t begin, int64_t end, int64_t dim,
                      const double* v1, const double* v2, double* out1, double* out2) {
  HWY_DYNAMIC_DISPATCH(UnitColumnDotsImpl)(columns, stride, inv, begin, end, dim, v1, v2, out1, out2);
}
void recent_anomalies(const float* keys, const int32_t* rows, int64_t count, int64_t dim, const double* inv,
                      int64_t window, double* running, double* products, double* out) {
  HWY_DYNAMIC_DISPATCH(RecentAnomaliesImpl)(keys, rows, count, dim, inv, window, running, products, out);
}

namespace scalar {
void indexed_row_dots(const float* rows, const int32_t* index, int64_t count, int64_t dim, const float* v,
                      double* out) {
  for (int64_t j = 0; j < count; ++j) {
    const float* row = rows + static_cast<int64_t>(index[j]) * dim;
    double s = 0.0;
    for (int64_t e = 0; e < dim; ++e) s += double(row[e]) * v[e];
    out[j] = s;
  }
}
}  // namespace scalar

}  // namespace veloxquant::eviction
#endif  // HWY_ONCE
