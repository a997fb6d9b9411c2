#include "veloxquant/caches/group_affine_codes.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/half.h"
#include "veloxquant/core/bit_packing.h"

namespace veloxquant {

GroupParams16 fit_group(const float* x, std::size_t n, std::size_t stride, int bits) {
  float lo = x[0], hi = x[0];
  for (std::size_t i = 1; i < n; ++i) {
    lo = std::min(lo, x[i * stride]);
    hi = std::max(hi, x[i * stride]);
  }
  const float levels = static_cast<float>((1 << bits) - 1);
  GroupParams16 p;
  p.min = base::f32_to_f16(lo);
  const float min16 = base::f16_to_f32(p.min);
  p.scale = base::f32_to_f16(std::max((hi - min16) / levels, 1e-8f));
  return p;
}

void encode_group(const float* x, std::size_t n, std::size_t stride, int bits, GroupParams16 params,
                  uint8_t* codes, std::size_t code_stride) {
  const float levels = static_cast<float>((1 << bits) - 1);
  const float scale = base::f16_to_f32(params.scale);
  const float min = base::f16_to_f32(params.min);
  for (std::size_t i = 0; i < n; ++i) {
    float code = 0.0f;
    if (scale > 0.0f) code = std::clamp(std::nearbyint((x[i * stride] - min) / scale), 0.0f, levels);
    codes[i * code_stride] = static_cast<uint8_t>(code);
  }
}

float decode_code(uint8_t code, GroupParams16 params) {
  return static_cast<float>(code) * base::f16_to_f32(params.scale) + base::f16_to_f32(params.min);
}

std::size_t token_groups(int dim, int group) {
  return static_cast<std::size_t>((dim + group - 1) / group);
}

void encode_token_row(const float* x, int dim, int group, int bits, uint32_t* words, GroupParams16* params) {
  uint8_t codes[1024];
  std::vector<uint8_t> big;
  uint8_t* c = codes;
  if (dim > 1024) {
    big.resize(static_cast<std::size_t>(dim));
    c = big.data();
  }
  for (std::size_t g = 0; g < token_groups(dim, group); ++g) {
    const std::size_t begin = g * static_cast<std::size_t>(group);
    const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(group), dim - begin);
    params[g] = fit_group(x + begin, n, 1, bits);
    encode_group(x + begin, n, 1, bits, params[g], c + begin, 1);
  }
  core::pack_words(c, static_cast<std::size_t>(dim), bits, words);
}

void decode_token_row(const uint32_t* words, const GroupParams16* params, int dim, int group, int bits,
                      float* out) {
  uint8_t codes[1024];
  std::vector<uint8_t> big;
  uint8_t* c = codes;
  if (dim > 1024) {
    big.resize(static_cast<std::size_t>(dim));
    c = big.data();
  }
  core::unpack_words(words, static_cast<std::size_t>(dim), bits, c);
  for (int d = 0; d < dim; ++d) out[d] = decode_code(c[d], params[d / group]);
}

}  // namespace veloxquant
