#include "veloxquant/quant/rabitq.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "veloxquant/core/simd_kernels.h"
#include "veloxquant/quant/code_io.h"

namespace veloxquant::quant {

RaBitQ::RaBitQ(int dim, int bits, uint64_t seed)
    : dim_((check_dim("rabitq", dim), dim)),
      sign_bytes_((check_bits("rabitq", bits, 1, 1), (static_cast<std::size_t>(dim) + 7) / 8)),
      rotation_(dim, seed) {}

void RaBitQ::encode(const float* x, std::size_t n, uint8_t* codes) const {
  const auto d = static_cast<std::size_t>(dim_);
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(dim_));
  thread_local std::vector<float> r;
  r.resize(d);
  for (std::size_t i = 0; i < n; ++i) {
    uint8_t* code = codes + i * code_bytes();
    const float* v = x + i * d;
    double sq = 0.0;
    for (std::size_t j = 0; j < d; ++j) sq += static_cast<double>(v[j]) * v[j];
    const float norm = static_cast<float>(std::sqrt(sq));
    const float inv = norm > 0.0f ? 1.0f / norm : 0.0f;
    for (std::size_t j = 0; j < d; ++j) r[j] = v[j] * inv;
    rotation_.forward(r.data(), r.data());
    std::fill(code, code + sign_bytes_, uint8_t{0});
    double abs_sum = 0.0;
    for (std::size_t j = 0; j < d; ++j) {
      if (r[j] >= 0.0f) code[j / 8] |= static_cast<uint8_t>(1u << (j % 8));
      abs_sum += std::abs(r[j]);
    }
    // A zero vector has no direction: alignment 1 keeps the estimator finite (it scores 0).
    const float alignment = norm > 0.0f ? static_cast<float>(abs_sum) * inv_sqrt_d : 1.0f;
    detail::write_f32(code + sign_bytes_, norm);
    detail::write_f32(code + sign_bytes_ + 4, alignment);
  }
}

float RaBitQ::alignment(const uint8_t* code) const { return detail::read_f32(code + sign_bytes_ + 4); }

void RaBitQ::decode(const uint8_t* codes, std::size_t n, float* out) const {
  const auto d = static_cast<std::size_t>(dim_);
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(dim_));
  for (std::size_t i = 0; i < n; ++i) {
    const uint8_t* code = codes + i * code_bytes();
    float* o = out + i * d;
    for (std::size_t j = 0; j < d; ++j) o[j] = (code[j / 8] >> (j % 8)) & 1u ? inv_sqrt_d : -inv_sqrt_d;
    rotation_.inverse(o, o);
    core::simd::scale(o, detail::read_f32(code + sign_bytes_) * alignment(code), d);
  }
}

PreparedQuery RaBitQ::prepare_query(const float* query) const {
  PreparedQuery prepared;
  prepared.rotated.resize(static_cast<std::size_t>(dim_));
  rotation_.forward(query, prepared.rotated.data());
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(dim_));
  const float vertex[2] = {-inv_sqrt_d, inv_sqrt_d};  // a sign bit's coordinate of o_bar
  prepared.lut.resize(sign_bytes_ * 256);
  detail::build_byte_lut(prepared.rotated.data(), static_cast<std::size_t>(dim_), 1, vertex, sign_bytes_,
                         prepared.lut.data());
  return prepared;
}

void RaBitQ::score(const PreparedQuery& query, const uint8_t* codes, std::size_t n, float* scores) const {
  for (std::size_t i = 0; i < n; ++i) {
    const uint8_t* code = codes + i * code_bytes();
    const float o_bar_q = core::simd::lut_sum(query.lut.data(), code, sign_bytes_);
    scores[i] = detail::read_f32(code + sign_bytes_) * o_bar_q / alignment(code);
  }
}

}  // namespace veloxquant::quant
