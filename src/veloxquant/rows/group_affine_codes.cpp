#include "veloxquant/rows/group_affine_codes.h"

#include <vector>

#include "base/half.h"
#include "veloxquant/core/bit_packing.h"

namespace veloxquant {

float decode_code(uint8_t code, GroupParams16 params) {
  return static_cast<float>(code) * base::f16_to_f32(params.scale_f16) + base::f16_to_f32(params.min_f16);
}

std::size_t token_groups(int dim, int group) {
  return core::groups_per_row(static_cast<std::size_t>(dim), static_cast<std::size_t>(group));
}

void encode_token_row(const float* x, int dim, int group, int bits, uint32_t* words, GroupParams16* params) {
  thread_local std::vector<uint8_t> codes;
  codes.resize(static_cast<std::size_t>(dim));
  core::quantize_per_token(x, 1, static_cast<std::size_t>(dim), bits, static_cast<std::size_t>(group), codes.data(),
                           params);
  core::pack_words(codes.data(), codes.size(), bits, words);
}

void decode_token_row(const uint32_t* words, const GroupParams16* params, int dim, int group, int bits, float* out) {
  thread_local std::vector<uint8_t> codes;
  codes.resize(static_cast<std::size_t>(dim));
  core::unpack_words(words, codes.size(), bits, codes.data());
  core::dequantize_per_token(codes.data(), 1, static_cast<std::size_t>(dim), static_cast<std::size_t>(group), params,
                             out);
}

}  // namespace veloxquant
