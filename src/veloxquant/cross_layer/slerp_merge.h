#pragma once
// MiniCache's per-token merge of a layer's vector with its primary layer's vector (spec §4.3;
// Liu et al., NeurIPS 2024, arXiv 2405.14366, §3: magnitude and direction are separated,
// directions interpolated on the sphere, very dissimilar tokens kept as they are):
//   1. magnitude = ||x|| (fp32), direction = x / max(||x||, 1e-8), for both vectors;
//   2. cos = <dir_primary, dir_merge>;
//   3. cos < retention_threshold: the token is retained (its own vector, unchanged);
//   4. otherwise shared = SLERP(dir_primary, dir_merge, t) with w = arccos(clip(cos, -1, 1)):
//        sin((1 - t) w) / sin w * dir_primary + sin(t w) / sin w * dir_merge,
//      or the normalized lerp (1 - t) dir_primary + t dir_merge when sin w < 1e-6; the result
//      is renormalized;
//   5. reconstruction = magnitude_merge * shared.
namespace veloxquant::cross_layer {

// Unit vectors a, b -> the renormalized interpolated direction (step 4).
void slerp_direction(const float* a, const float* b, int dim, float t, float* out);

// Writes the merge layer's reconstruction of `merge` into `out`; returns true when the token
// was retained (out = merge).
bool merge_token(const float* primary, const float* merge, int dim, float retention_threshold, float t, float* out);

}  // namespace veloxquant::cross_layer
