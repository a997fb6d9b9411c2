#include "veloxquant/caches/skvq_codes.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "base/half.h"
#include "veloxquant/caches/skvq_clip_search.h"
#include "veloxquant/core/bit_packing.h"

namespace veloxquant::skvq {

namespace {

// f16 cannot hold the 1e-8 floor: a scale that rounds to zero becomes the smallest subnormal,
// which still reconstructs a constant group exactly (core/group_quant.cpp's rule).
uint16_t encode_scale(float scale) {
  uint16_t h = base::f32_to_f16(scale);
  if ((h & 0x7fffu) == 0) h = 1;
  return h;
}

}  // namespace

float clip_candidate(double alpha_max, int k) {
  return static_cast<float>(alpha_max * (1.0 - 0.05 * static_cast<double>(k)));
}

CodeLayout code_layout(int dim, int bits, int group) {
  CodeLayout l;
  l.dim = dim;
  l.bits = bits;
  l.group = group;
  l.words = static_cast<int64_t>(core::packed_words(static_cast<std::size_t>(dim), bits));
  l.groups = static_cast<int64_t>(token_groups(dim, group));
  return l;
}

void range_order(const float* x, int64_t rows, int64_t dim, int32_t* perm) {
  std::vector<float> range(static_cast<std::size_t>(dim));
  for (int64_t c = 0; c < dim; ++c) {
    float lo = x[c], hi = x[c];
    for (int64_t r = 1; r < rows; ++r) {
      lo = std::min(lo, x[r * dim + c]);
      hi = std::max(hi, x[r * dim + c]);
    }
    range[static_cast<std::size_t>(c)] = hi - lo;
  }
  std::iota(perm, perm + dim, 0);
  std::stable_sort(perm, perm + dim, [&](int32_t a, int32_t b) {
    return range[static_cast<std::size_t>(a)] < range[static_cast<std::size_t>(b)];
  });
}

GroupParams16 clip_params(float lo, float hi, int bits, float alpha) {
  const float levels = static_cast<float>((1u << bits) - 1u);
  GroupParams16 p;
  p.min_f16 = base::f32_to_f16(alpha * lo);
  const float min_used = base::f16_to_f32(p.min_f16);
  p.scale_f16 = encode_scale(std::max((alpha * hi - min_used) / levels, 1e-8f));
  return p;
}

GroupParams16 clip_group(const float* x, int n, int bits, float alpha, uint8_t* codes) {
  const float levels = static_cast<float>((1u << bits) - 1u);
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const GroupParams16 p = clip_params(lo, hi, bits, alpha);
  const float min_used = base::f16_to_f32(p.min_f16);
  const float scale = base::f16_to_f32(p.scale_f16);
  for (int i = 0; i < n; ++i) {
    const float q = std::nearbyint((x[i] - min_used) / scale);  // half to even (default rounding mode)
    codes[i] = static_cast<uint8_t>(std::clamp(q, 0.0f, levels));
  }
  return p;
}

double group_error(const float* x, const uint8_t* codes, int n, GroupParams16 params) {
  double err = 0.0;
  for (int i = 0; i < n; ++i) {
    const double e = static_cast<double>(decode_code(codes[i], params)) - static_cast<double>(x[i]);
    err += e * e;
  }
  return err;
}

void encode_row(const float* x, const int32_t* perm, const CodeLayout& layout, bool search, double alpha_max,
                uint32_t* row) {
  // Per calling thread (the cache encodes rows across the pool; each worker has its own).
  thread_local std::vector<float> ordered;
  thread_local std::vector<uint8_t> codes;
  const int d = layout.dim, g = layout.group;
  ordered.resize(static_cast<std::size_t>(d));
  codes.resize(static_cast<std::size_t>(d));
  for (int p = 0; p < d; ++p) ordered[static_cast<std::size_t>(p)] = perm ? x[perm[p]] : x[p];
  auto* params = reinterpret_cast<GroupParams16*>(row + layout.words);
  for (int64_t k = 0; k < layout.groups; ++k) {
    const int begin = static_cast<int>(k) * g, n = std::min(g, d - begin);
    const float* xs = ordered.data() + begin;
    uint8_t* out = codes.data() + begin;
    // The search in SIMD lanes, one candidate per lane (skvq_clip_search.h; the same codes and
    // parameters as the candidate-by-candidate loop, scalar::search_clip_group).
    params[k] = search ? search_clip_group(xs, n, layout.bits, alpha_max, out)
                       : clip_group(xs, n, layout.bits, clip_candidate(alpha_max, 0), out);
  }
  core::pack_words(codes.data(), codes.size(), layout.bits, row);
}

void decode_row(const uint32_t* row, const int32_t* perm, const CodeLayout& layout, float* x) {
  thread_local std::vector<uint8_t> codes;
  const int d = layout.dim, g = layout.group;
  codes.resize(static_cast<std::size_t>(d));
  core::unpack_words(row, codes.size(), layout.bits, codes.data());
  const auto* params = reinterpret_cast<const GroupParams16*>(row + layout.words);
  for (int p = 0; p < d; ++p) {
    const float v = decode_code(codes[static_cast<std::size_t>(p)], params[p / g]);
    x[perm ? perm[p] : p] = v;
  }
}

}  // namespace veloxquant::skvq
