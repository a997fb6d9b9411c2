#include "veloxquant/core/group_quant.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/half.h"
#include "veloxquant/errors.h"

namespace veloxquant::core {
namespace {

void check_group_bits(int bits) {
  if (bits < 1 || bits > 8)
    throw QuantizerConfigError("group quantization: bits must be in 1..8, got " + std::to_string(bits));
}
void check_group_size(std::size_t group) {
  if (group == 0) throw QuantizerConfigError("group quantization: group size must be positive, got 0");
}

// fp16 cannot hold the 1e-8 floor (its smallest subnormal is 2^-24 ~ 6e-8): a scale that
// rounds to zero is replaced by that subnormal, which still reconstructs a constant group
// exactly (every code is 0).
uint16_t encode_scale(float scale) {
  uint16_t h = base::f32_to_f16(scale);
  if ((h & 0x7fffu) == 0) h = 1;
  return h;
}

}  // namespace

GroupParams quantize_group(const float* x, std::size_t count, std::size_t stride, int bits, uint8_t* codes) {
  check_group_bits(bits);
  const float levels = static_cast<float>((1u << bits) - 1u);
  float lo = x[0], hi = x[0];
  for (std::size_t i = 1; i < count; ++i) {
    lo = std::min(lo, x[i * stride]);
    hi = std::max(hi, x[i * stride]);
  }
  GroupParams p;
  p.min_f16 = base::f32_to_f16(lo);
  const float min_used = base::f16_to_f32(p.min_f16);
  p.scale_f16 = encode_scale(std::max((hi - min_used) / levels, 1e-8f));
  const float scale = base::f16_to_f32(p.scale_f16);
  for (std::size_t i = 0; i < count; ++i) {
    // nearbyint rounds half to even in the default mode, like numpy's round.
    const float q = std::nearbyint((x[i * stride] - min_used) / scale);
    codes[i * stride] = static_cast<uint8_t>(std::clamp(q, 0.0f, levels));
  }
  return p;
}

void dequantize_group(const uint8_t* codes, std::size_t count, std::size_t stride, GroupParams params, float* out) {
  const float scale = base::f16_to_f32(params.scale_f16);
  const float lo = base::f16_to_f32(params.min_f16);
  for (std::size_t i = 0; i < count; ++i) out[i * stride] = static_cast<float>(codes[i * stride]) * scale + lo;
}

std::size_t groups_per_row(std::size_t dim, std::size_t group) {
  check_group_size(group);
  return (dim + group - 1) / group;
}

void quantize_per_token(const float* x, std::size_t rows, std::size_t dim, int bits, std::size_t group, uint8_t* codes,
                        GroupParams* params) {
  const std::size_t ng = groups_per_row(dim, group);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t g = 0; g < ng; ++g) {
      const std::size_t begin = g * group, count = std::min(group, dim - begin);
      params[r * ng + g] = quantize_group(x + r * dim + begin, count, 1, bits, codes + r * dim + begin);
    }
}

void dequantize_per_token(const uint8_t* codes, std::size_t rows, std::size_t dim, std::size_t group,
                          const GroupParams* params, float* out) {
  const std::size_t ng = groups_per_row(dim, group);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t g = 0; g < ng; ++g) {
      const std::size_t begin = g * group, count = std::min(group, dim - begin);
      dequantize_group(codes + r * dim + begin, count, 1, params[r * ng + g], out + r * dim + begin);
    }
}

void quantize_per_channel(const float* x, std::size_t tokens, std::size_t dim, int bits, std::size_t group,
                          uint8_t* codes, GroupParams* params) {
  const std::size_t ng = groups_per_row(tokens, group);
  for (std::size_t g = 0; g < ng; ++g) {
    const std::size_t begin = g * group, count = std::min(group, tokens - begin);
    for (std::size_t c = 0; c < dim; ++c)
      params[g * dim + c] = quantize_group(x + begin * dim + c, count, dim, bits, codes + begin * dim + c);
  }
}

void dequantize_per_channel(const uint8_t* codes, std::size_t tokens, std::size_t dim, std::size_t group,
                            const GroupParams* params, float* out) {
  const std::size_t ng = groups_per_row(tokens, group);
  for (std::size_t g = 0; g < ng; ++g) {
    const std::size_t begin = g * group, count = std::min(group, tokens - begin);
    for (std::size_t c = 0; c < dim; ++c)
      dequantize_group(codes + begin * dim + c, count, dim, params[g * dim + c], out + begin * dim + c);
  }
}

uint16_t quantize_int8_row(const float* v, std::size_t dim, int8_t* codes) {
  float amax = 0.0f;
  for (std::size_t i = 0; i < dim; ++i) amax = std::max(amax, std::abs(v[i]));
  const uint16_t scale_h = encode_scale(std::max(amax / 127.0f, 1e-8f));
  const float scale = base::f16_to_f32(scale_h);
  for (std::size_t i = 0; i < dim; ++i)
    codes[i] = static_cast<int8_t>(std::clamp(std::nearbyint(v[i] / scale), -127.0f, 127.0f));
  return scale_h;
}

void dequantize_int8_row(const int8_t* codes, std::size_t dim, uint16_t scale_f16, float* out) {
  const float scale = base::f16_to_f32(scale_f16);
  for (std::size_t i = 0; i < dim; ++i) out[i] = static_cast<float>(codes[i]) * scale;
}

}  // namespace veloxquant::core
