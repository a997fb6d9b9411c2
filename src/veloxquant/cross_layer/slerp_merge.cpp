#include "veloxquant/cross_layer/slerp_merge.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace veloxquant::cross_layer {
namespace {

float norm_of(const float* x, int dim) {
  float s = 0.0f;
  for (int d = 0; d < dim; ++d) s += x[d] * x[d];
  return std::sqrt(s);
}

}  // namespace

void slerp_direction(const float* a, const float* b, int dim, float t, float* out) {
  float dot = 0.0f;
  for (int d = 0; d < dim; ++d) dot += a[d] * b[d];
  const float omega = std::acos(std::clamp(dot, -1.0f, 1.0f));
  const float sin_omega = std::sin(omega);
  float wa = 1.0f - t, wb = t;  // the normalized-lerp fallback for (anti)parallel directions
  if (sin_omega >= 1e-6f) {
    wa = std::sin((1.0f - t) * omega) / sin_omega;
    wb = std::sin(t * omega) / sin_omega;
  }
  for (int d = 0; d < dim; ++d) out[d] = wa * a[d] + wb * b[d];
  const float n = std::max(norm_of(out, dim), 1e-8f);
  for (int d = 0; d < dim; ++d) out[d] /= n;
}

bool merge_token(const float* primary, const float* merge, int dim, float retention_threshold, float t, float* out) {
  const float norm_p = norm_of(primary, dim), norm_m = norm_of(merge, dim);
  const float inv_p = 1.0f / std::max(norm_p, 1e-8f), inv_m = 1.0f / std::max(norm_m, 1e-8f);
  std::vector<float> dir_p(static_cast<std::size_t>(dim)), dir_m(static_cast<std::size_t>(dim));
  float cos = 0.0f;
  for (int d = 0; d < dim; ++d) {
    dir_p[d] = primary[d] * inv_p;
    dir_m[d] = merge[d] * inv_m;
    cos += dir_p[d] * dir_m[d];
  }
  if (cos < retention_threshold) {
    std::copy(merge, merge + dim, out);
    return true;
  }
  slerp_direction(dir_p.data(), dir_m.data(), dim, t, out);
  for (int d = 0; d < dim; ++d) out[d] *= norm_m;
  return false;
}

}  // namespace veloxquant::cross_layer
