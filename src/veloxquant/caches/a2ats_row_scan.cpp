// Highway kernel for a2ats_row_scan.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/caches/a2ats_row_scan.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/caches/a2ats_row_scan.h"

#include <algorithm>
#include <cmath>

HWY_BEFORE_NAMESPACE();
namespace veloxquant::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
// A block of rows' four sums (one 128-bit vector per row) into sums[r * 4 + g]. SUBS > 0: the
// sub-vector count known at compile time (head_dim 64 / a2ats_sub_dim 8), so the lookups unroll.
template <int64_t SUBS>
HWY_INLINE void block_sums(const float* lut4, int64_t subs_runtime, int64_t entries, const uint8_t* code,
                           int64_t stride, int64_t rows, float* sums) {
  const hn::FixedTag<float, 4> d4;
  const int64_t subs = SUBS > 0 ? SUBS : subs_runtime;
  for (int64_t r = 0; r < rows; ++r, code += stride) {
    auto dot = hn::Zero(d4);
#pragma GCC unroll 16
    for (int64_t m = 0; m < subs; ++m) dot = hn::Add(dot, hn::LoadU(d4, lut4 + (m * entries + code[m]) * 4));
    hn::StoreU(dot, d4, sums + r * 4);
  }
}

template <int64_t SUBS>
void scan(const A2atsTables& tables, const A2atsCodeRows& code_rows, int64_t group, float scale,
          const A2atsScanOut& out) {
  const float* lut4 = tables.lut4;
  const int64_t subs = tables.subs, entries = tables.entries;
  const uint8_t* codes = code_rows.codes;
  const int64_t stride = code_rows.stride, n = code_rows.n;
  float* const* dots = out.dots;
  float* const* logits = out.logits;
  float* top = out.top;
  using DF = hn::ScalableTag<float>;
  const DF df;
  using V = hn::Vec<DF>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  constexpr int64_t kBlock = 64;  // rows per block: a multiple of every target's lane count
  HWY_ALIGN float sums[kBlock * 4];
  const V vscale = hn::Set(df, scale);
  V vtop[4] = {hn::Set(df, -INFINITY), hn::Set(df, -INFINITY), hn::Set(df, -INFINITY), hn::Set(df, -INFINITY)};
  float stop[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};  // the last, partial block's rows
  for (int64_t j = 0; j < n; j += kBlock) {
    const int64_t rows = std::min(kBlock, n - j);
    block_sums<SUBS>(lut4, subs, entries, codes + j * stride, stride, rows, sums);
    if (rows < kBlock || kBlock % lanes != 0) {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t g = 0; g < group; ++g) {
          const float dot = sums[r * 4 + g];
          if (dots) dots[g][j + r] = dot;
          const float l = dot * scale;
          logits[g][j + r] = l;
          stop[g] = std::max(stop[g], l);
        }
      }
      continue;
    }
    for (int64_t r = 0; r < kBlock; r += lanes) {
      V v[4];
      hn::LoadInterleaved4(df, sums + r * 4, v[0], v[1], v[2], v[3]);  // v[g]: head g of `lanes` rows
      for (int64_t g = 0; g < group; ++g) {
        if (dots) hn::StoreU(v[g], df, dots[g] + j + r);
        const V l = hn::Mul(v[g], vscale);
        hn::StoreU(l, df, logits[g] + j + r);
        vtop[g] = hn::IfThenElse(hn::Lt(vtop[g], l), l, vtop[g]);  // std::max(top, l): NaN never wins
      }
    }
  }
  // Lanes hold no NaN, so the order of the maxima does not matter (a +-0 tie can only flip the
  // sign of a zero top, and exp(l - top) is the same for either).
  for (int64_t g = 0; g < group; ++g) top[g] = std::max(hn::GetLane(hn::MaxOfLanes(df, vtop[g])), stop[g]);
}

bool GroupTablesImpl(const float* centroids, int64_t subs, int64_t entries, int64_t sub, const float* const* queries,
                     int64_t group, float* lut4) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  if (entries % lanes != 0 || group < 1 || group > kA2atsScanLanes) return false;
  const auto zero = hn::Zero(df);
  for (int64_t m = 0; m < subs; ++m) {
    const float* book = centroids + m * sub * entries;
    for (int64_t c = 0; c < entries; c += lanes) {
      hn::Vec<decltype(df)> acc[kA2atsScanLanes] = {zero, zero, zero, zero};
      for (int64_t k = 0; k < sub; ++k) {
        const auto centre = hn::LoadU(df, book + k * entries + c);  // read once for the group
        for (int64_t g = 0; g < group; ++g) acc[g] = hn::MulAdd(hn::Set(df, queries[g][m * sub + k]), centre, acc[g]);
      }
      hn::StoreInterleaved4(acc[0], acc[1], acc[2], acc[3], df, lut4 + (m * entries + c) * kA2atsScanLanes);
    }
  }
  return true;
}

void InterleaveImpl(const float* tables, int64_t group, int64_t size, float* lut4) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto zero = hn::Zero(df);
  int64_t i = 0;
  for (; i + lanes <= size; i += lanes) {
    const auto at = [&](int64_t g) { return g < group ? hn::LoadU(df, tables + g * size + i) : zero; };
    hn::StoreInterleaved4(at(0), at(1), at(2), at(3), df, lut4 + i * 4);
  }
  for (; i < size; ++i) {
    for (int64_t g = 0; g < 4; ++g) lut4[i * 4 + g] = g < group ? tables[g * size + i] : 0.0f;
  }
}

bool TableImpl(const float* centroids, int64_t subs, int64_t entries, int64_t sub, const float* query, float* lut) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  if (entries % lanes != 0) return false;
  for (int64_t m = 0; m < subs; ++m) {
    const float* book = centroids + m * sub * entries;
    for (int64_t c = 0; c < entries; c += lanes) {
      auto acc = hn::Zero(df);
      for (int64_t k = 0; k < sub; ++k) {
        acc = hn::MulAdd(hn::Set(df, query[m * sub + k]), hn::LoadU(df, book + k * entries + c), acc);
      }
      hn::StoreU(acc, df, lut + m * entries + c);
    }
  }
  return true;
}

void ScanImpl(const A2atsTables& tables, const A2atsCodeRows& rows, int64_t group, float scale,
              const A2atsScanOut& out) {
  if (tables.subs == 8) {
    scan<8>(tables, rows, group, scale, out);
  } else {
    scan<0>(tables, rows, group, scale, out);
  }
}
#else
bool GroupTablesImpl(const float*, int64_t, int64_t, int64_t, const float* const*, int64_t, float*) { return false; }
bool TableImpl(const float*, int64_t, int64_t, int64_t, const float*, float*) { return false; }
void InterleaveImpl(const float* tables, int64_t group, int64_t size, float* lut4) {
  scalar::a2ats_interleave_tables(tables, group, size, lut4);
}
void ScanImpl(const A2atsTables& tables, const A2atsCodeRows& rows, int64_t group, float scale,
              const A2atsScanOut& out) {
  scalar::a2ats_scan_rows(tables, rows, group, scale, out);
}
#endif

}  // namespace veloxquant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant {
HWY_EXPORT(ScanImpl);
HWY_EXPORT(InterleaveImpl);
HWY_EXPORT(TableImpl);
HWY_EXPORT(GroupTablesImpl);

bool a2ats_group_tables(const float* centroids, int64_t subs, int64_t entries, int64_t sub, const float* const* queries,
                        int64_t group, float* lut4) {
  return HWY_DYNAMIC_DISPATCH(GroupTablesImpl)(centroids, subs, entries, sub, queries, group, lut4);
}

bool a2ats_fused_table(const float* centroids, int64_t subs, int64_t entries, int64_t sub, const float* query,
                       float* lut) {
  return HWY_DYNAMIC_DISPATCH(TableImpl)(centroids, subs, entries, sub, query, lut);
}

void a2ats_interleave_tables(const float* tables, int64_t group, int64_t size, float* lut4) {
  HWY_DYNAMIC_DISPATCH(InterleaveImpl)(tables, group, size, lut4);
}

void a2ats_scan_rows(const A2atsTables& tables, const A2atsCodeRows& rows, int64_t group, float scale,
                     const A2atsScanOut& out) {
  HWY_DYNAMIC_DISPATCH(ScanImpl)(tables, rows, group, scale, out);
}

namespace scalar {
void a2ats_interleave_tables(const float* tables, int64_t group, int64_t size, float* lut4) {
  for (int64_t i = 0; i < size; ++i) {
    for (int64_t g = 0; g < kA2atsScanLanes; ++g) lut4[i * 4 + g] = g < group ? tables[g * size + i] : 0.0f;
  }
}

void a2ats_scan_rows(const A2atsTables& tables, const A2atsCodeRows& rows, int64_t group, float scale,
                     const A2atsScanOut& out) {
  float* const* dots = out.dots;
  float* const* logits = out.logits;
  float* top = out.top;
  for (int64_t g = 0; g < group; ++g) top[g] = -INFINITY;
  const uint8_t* code = rows.codes;
  for (int64_t j = 0; j < rows.n; ++j, code += rows.stride) {
    float dot[kA2atsScanLanes] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t m = 0; m < tables.subs; ++m) {
      const float* t = tables.lut4 + (m * tables.entries + code[m]) * kA2atsScanLanes;
      for (int64_t g = 0; g < kA2atsScanLanes; ++g) dot[g] += t[g];
    }
    for (int64_t g = 0; g < group; ++g) {
      if (dots) dots[g][j] = dot[g];
      const float l = dot[g] * scale;
      logits[g][j] = l;
      top[g] = std::max(top[g], l);
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant
#endif  // HWY_ONCE
