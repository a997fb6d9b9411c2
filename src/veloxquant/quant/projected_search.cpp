// Highway kernel for projected_search.h, compiled once per target and dispatched at run time.
// Compiled with -ffp-contract=off (src/veloxquant/CMakeLists.txt): the projection and ||x||^2
// are bounded by the slack, and the distances are spelled as FMAs, as the scalar reference does.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/quant/projected_search.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/quant/projected_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "veloxquant/quant/nearest_codeword.h"

#ifndef VELOXQUANT_PROJECTED_SEARCH_ONCE_
#define VELOXQUANT_PROJECTED_SEARCH_ONCE_
namespace veloxquant::pvq::projected_detail {
// What one search reads.
struct View {
  const float* data;
  const float* proj;
  const int32_t* index;
  int64_t blocks;
  int sub;
  const float* axis;
  float max_norm;
  const float* transposed;  // the full table (targets without FMA search it whole)
  const float* norms;
  int64_t entries;
};

// The largest gap |<x, v> - p_c| a block may start at and still hold an entry whose fused
// distance could be <= best: sqrt(best + ||x||^2 + 1e-5 S^2) + 1e-5 S, S = ||x|| + max ||c||.
// The fused distances and ||x||^2 are each within a few float roundings (~1e-6 S^2) of their
// exact values, the projections within ~1e-6 S, far inside the two slacks.
inline double gap_limit(double best, double xx, double x_norm, double max_norm) {
  const double s = x_norm + max_norm;
  return std::sqrt(std::max(0.0, best + xx + 1e-5 * s * s)) + 1e-5 * s;
}
}  // namespace veloxquant::pvq::projected_detail
#endif

HWY_BEFORE_NAMESPACE();
namespace veloxquant::pvq::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using projected_detail::View;

#if HWY_TARGET <= HWY_AVX2  // targets with FMA: MulAdd is one fused rounding, as std::fma
template <int SUB>
HWY_INLINE int64_t projected_nearest(const View& v, const float* x) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  constexpr int64_t kBlock = ProjectedBook::kBlock;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int sub = SUB > 0 ? SUB : v.sub;
  constexpr int kMaxSub = 16;
  hn::Vec<decltype(d)> xe[SUB > 0 ? SUB : kMaxSub];
  float px = 0.0f, xx = 0.0f;
  for (int e = 0; e < sub; ++e) {
    xe[e] = hn::Set(d, -2.0f * x[e]);
    px += x[e] * v.axis[e];
    xx += x[e] * x[e];
  }
  const double x_norm = std::sqrt(static_cast<double>(xx));
  const int64_t stored = v.blocks * kBlock;
  const int64_t k0 = std::lower_bound(v.proj, v.proj + stored, px) - v.proj;
  int64_t right = k0 / kBlock, left = right - 1;
  auto best = hn::Set(d, std::numeric_limits<float>::infinity());
  auto best_index = hn::Set(di, std::numeric_limits<int32_t>::max());
  float bound = std::numeric_limits<float>::infinity();
  double limit = std::numeric_limits<double>::infinity();
  // One block's distances folded into the lanes' (smallest d, lowest original index). A block
  // with no distance <= the smallest so far changes nothing (an equal one may carry a lower
  // index, so <=, not <).
  const auto take = [&](int64_t b) {
    const float* blk = v.data + b * kBlock * (sub + 1);
    bool changed = false;
    for (int64_t o = 0; o < kBlock; o += lanes) {
      auto dist = hn::LoadU(d, blk + o);
      for (int e = 0; e < sub; ++e) dist = hn::MulAdd(xe[e], hn::LoadU(d, blk + (e + 1) * kBlock + o), dist);
      if (hn::AllFalse(d, hn::Le(dist, hn::Set(d, bound)))) continue;
      const auto idx = hn::LoadU(di, v.index + b * kBlock + o);
      const auto closer = hn::Or(hn::RebindMask(di, hn::Lt(dist, best)),
                                 hn::And(hn::RebindMask(di, hn::Eq(dist, best)), hn::Lt(idx, best_index)));
      best = hn::IfThenElse(hn::RebindMask(d, closer), dist, best);
      best_index = hn::IfThenElse(closer, idx, best_index);
      changed = true;
    }
    if (changed) {
      bound = hn::GetLane(hn::MinOfLanes(d, best));
      limit = projected_detail::gap_limit(bound, xx, x_norm, v.max_norm);
    }
  };
  bool go_right = right < v.blocks, go_left = left >= 0;
  while (go_right || go_left) {
    if (go_right) {
      if (static_cast<double>(v.proj[right * kBlock]) - px > limit) {
        go_right = false;
      } else {
        take(right);
        go_right = ++right < v.blocks;
      }
    }
    if (go_left) {
      if (px - static_cast<double>(v.proj[left * kBlock + kBlock - 1]) > limit) {
        go_left = false;
      } else {
        take(left);
        go_left = --left >= 0;
      }
    }
  }
  // The lanes merged: the smallest distance, then the lowest index holding it.
  const float best_d = hn::GetLane(hn::MinOfLanes(d, best));
  const auto at_min = hn::RebindMask(di, hn::Eq(best, hn::Set(d, best_d)));
  const auto candidates = hn::IfThenElse(at_min, best_index, hn::Set(di, std::numeric_limits<int32_t>::max()));
  const int64_t found = hn::GetLane(hn::MinOfLanes(di, candidates));
  // No distance compared below infinity (a NaN point): the full search's answer for it.
  if (found == std::numeric_limits<int32_t>::max())
    return scalar::nearest_codeword_fused(v.transposed, v.norms, v.entries, v.sub, x);
  return found;
}

int64_t ProjectedNearestImpl(const View& v, const float* x) {
  if (v.sub == 4) return projected_nearest<4>(v, x);
  return projected_nearest<0>(v, x);
}
#else
int64_t ProjectedNearestImpl(const View& v, const float* x) {
  return scalar::nearest_codeword_fused(v.transposed, v.norms, v.entries, v.sub, x);
}
#endif

void ProjectedBatchImpl(const View& v, const float* xs, int64_t count, int64_t x_stride, int64_t* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = ProjectedNearestImpl(v, xs + i * x_stride);
}

}  // namespace veloxquant::pvq::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::pvq {
HWY_EXPORT(ProjectedBatchImpl);

void ProjectedBook::load(const float* transposed, const float* norms, int64_t entries, int sub) {
  transposed_ = transposed;
  norms_ = norms;
  sub_ = sub;
  entries_ = entries;
  blocks_ = (entries + kBlock - 1) / kBlock;
  // The principal axis: power iteration on the codewords' second-moment matrix (in double). Any
  // unit axis gives the same answers; the principal one leaves the fewest entries to read.
  std::vector<double> mean(static_cast<std::size_t>(sub), 0.0), m(static_cast<std::size_t>(sub * sub), 0.0);
  for (int64_t c = 0; c < entries; ++c) {
    for (int e = 0; e < sub; ++e) mean[static_cast<std::size_t>(e)] += transposed[e * entries + c];
  }
  for (double& x : mean) x /= static_cast<double>(entries);
  for (int64_t c = 0; c < entries; ++c) {
    for (int a = 0; a < sub; ++a) {
      const double xa = transposed[a * entries + c] - mean[static_cast<std::size_t>(a)];
      for (int b = 0; b < sub; ++b) {
        m[static_cast<std::size_t>(a) * sub + b] +=
            xa * (transposed[b * entries + c] - mean[static_cast<std::size_t>(b)]);
      }
    }
  }
  std::vector<double> axis(static_cast<std::size_t>(sub), 1.0), next(static_cast<std::size_t>(sub));
  for (int it = 0; it < 50; ++it) {
    double norm = 0.0;
    for (int a = 0; a < sub; ++a) {
      double s = 0.0;
      for (int b = 0; b < sub; ++b) s += m[static_cast<std::size_t>(a) * sub + b] * axis[static_cast<std::size_t>(b)];
      next[static_cast<std::size_t>(a)] = s;
      norm += s * s;
    }
    if (!(norm > 0.0)) break;  // no spread (one distinct codeword): keep the current axis
    for (int a = 0; a < sub; ++a)
      axis[static_cast<std::size_t>(a)] = next[static_cast<std::size_t>(a)] / std::sqrt(norm);
  }
  double axis_norm = 0.0;
  for (const double a : axis) axis_norm += a * a;
  axis_.resize(static_cast<std::size_t>(sub));
  for (int e = 0; e < sub; ++e)
    axis_[static_cast<std::size_t>(e)] = static_cast<float>(axis[static_cast<std::size_t>(e)] / std::sqrt(axis_norm));
  // Projections as the search forms <x, v> (float, coordinate order), entries sorted by them.
  std::vector<float> p(static_cast<std::size_t>(entries));
  max_norm_ = 0.0f;
  for (int64_t c = 0; c < entries; ++c) {
    float s = 0.0f;
    for (int e = 0; e < sub; ++e) s += transposed[e * entries + c] * axis_[static_cast<std::size_t>(e)];
    p[static_cast<std::size_t>(c)] = s;
    max_norm_ = std::max(max_norm_, std::sqrt(std::max(norms[c], 0.0f)));
  }
  std::vector<int32_t> order(static_cast<std::size_t>(entries));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return p[static_cast<std::size_t>(a)] < p[static_cast<std::size_t>(b)];
  });
  const int64_t stored = blocks_ * kBlock;
  proj_.assign(static_cast<std::size_t>(stored), std::numeric_limits<float>::infinity());
  index_.assign(static_cast<std::size_t>(stored), std::numeric_limits<int32_t>::max());
  data_.assign(static_cast<std::size_t>(stored * (sub + 1)), 0.0f);
  for (int64_t k = 0; k < stored; ++k) {
    const int64_t b = k / kBlock, o = k % kBlock;
    float* blk = data_.data() + b * kBlock * (sub + 1);
    if (k >= entries) {
      blk[o] = std::numeric_limits<float>::infinity();  // never below a real distance
      continue;
    }
    const int32_t c = order[static_cast<std::size_t>(k)];
    proj_[static_cast<std::size_t>(k)] = p[static_cast<std::size_t>(c)];
    index_[static_cast<std::size_t>(k)] = c;
    blk[o] = norms[c];
    for (int e = 0; e < sub; ++e) blk[(e + 1) * kBlock + o] = transposed[e * entries + c];
  }
}

int64_t ProjectedBook::nearest(const float* x) const {
  int64_t out = 0;
  nearest_batch(x, 1, 0, &out);
  return out;
}

void ProjectedBook::nearest_batch(const float* xs, int64_t count, int64_t x_stride, int64_t* out) const {
  const projected_detail::View v{data_.data(), proj_.data(), index_.data(), blocks_, sub_,
                                 axis_.data(), max_norm_,    transposed_,   norms_,  entries_};
  HWY_DYNAMIC_DISPATCH(ProjectedBatchImpl)(v, xs, count, x_stride, out);
}

}  // namespace veloxquant::pvq
#endif  // HWY_ONCE
