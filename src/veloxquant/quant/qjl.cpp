#include "veloxquant/quant/qjl.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "base/half.h"
#include "veloxquant/core/rng.h"
#include "veloxquant/core/simd_kernels.h"
#include "veloxquant/errors.h"
#include "veloxquant/quant/code_io.h"

namespace veloxquant::quant {
namespace {
constexpr uint64_t kJlStream = 2;  // derive_seed purpose: the JL matrix
const float kSqrtHalfPi = static_cast<float>(std::sqrt(std::numbers::pi / 2.0));
}  // namespace

SignSketch::SignSketch(int dim, int m, uint64_t seed) : dim_(dim), m_(m) {
  core::Rng rng(core::derive_seed(seed, kJlStream));
  s_.resize(static_cast<std::size_t>(m) * static_cast<std::size_t>(dim));
  for (auto& v : s_) v = static_cast<float>(rng.normal());
}

void SignSketch::encode_signs(const float* v, uint8_t* signs) const {
  const auto d = static_cast<std::size_t>(dim_);
  std::fill(signs, signs + sign_bytes(), uint8_t{0});
  for (std::size_t i = 0; i < static_cast<std::size_t>(m_); ++i)
    if (core::simd::dot(&s_[i * d], v, d) >= 0.0f) signs[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
}

void SignSketch::prepare(const float* q, std::vector<float>& sketched, std::vector<float>& lut) const {
  const auto d = static_cast<std::size_t>(dim_), m = static_cast<std::size_t>(m_);
  sketched.resize(m);
  for (std::size_t i = 0; i < m; ++i) sketched[i] = core::simd::dot(&s_[i * d], q, d);
  // A sign bit b contributes (2b - 1) s_i: the 1-bit "codebook" {-1, +1}.
  static const float plus_minus[2] = {-1.0f, 1.0f};
  lut.resize(sign_bytes() * 256);
  detail::build_byte_lut(sketched.data(), m, 1, plus_minus, sign_bytes(), lut.data());
}

float SignSketch::signed_sum(const std::vector<float>& lut, const uint8_t* signs) const {
  return core::simd::lut_sum(lut.data(), signs, sign_bytes());
}

void SignSketch::reconstruct(const uint8_t* signs, float* out) const {
  const auto d = static_cast<std::size_t>(dim_), m = static_cast<std::size_t>(m_);
  std::fill(out, out + d, 0.0f);
  for (std::size_t i = 0; i < m; ++i) {
    const float s = (signs[i / 8] >> (i % 8)) & 1u ? 1.0f : -1.0f;
    for (std::size_t j = 0; j < d; ++j) out[j] += s * s_[i * d + j];
  }
  core::simd::scale(out, kSqrtHalfPi / static_cast<float>(m), d);
}

Qjl::Qjl(int dim, int bits, uint64_t seed, int jl_dim)
    : dim_((check_dim("qjl", dim), dim)),
      bits_((check_bits("qjl", bits, 1, 8), bits)),
      sketch_(dim, jl_dim > 0 ? jl_dim : bits * dim, seed) {
  if (jl_dim < 0)
    throw QuantizerConfigError("qjl: jl_dim must be positive (0 = default), got " + std::to_string(jl_dim));
}

void Qjl::encode(const float* x, std::size_t n, uint8_t* codes) const {
  const auto d = static_cast<std::size_t>(dim_);
  for (std::size_t i = 0; i < n; ++i) {
    uint8_t* code = codes + i * code_bytes();
    const float* v = x + i * d;
    sketch_.encode_signs(v, code);
    double sq = 0.0;
    for (std::size_t j = 0; j < d; ++j) sq += static_cast<double>(v[j]) * v[j];
    detail::write_u16(code + sketch_.sign_bytes(), base::f32_to_bf16(static_cast<float>(std::sqrt(sq))));
  }
}

void Qjl::decode(const uint8_t* codes, std::size_t n, float* out) const {
  // The reconstruction whose inner product with any q is the estimator: ||k|| sqrt(pi/2)/m
  // S^T sign(S k). It is unbiased for <q, k> but far from k in L2 (the sketch is for scores).
  const auto d = static_cast<std::size_t>(dim_);
  for (std::size_t i = 0; i < n; ++i) {
    const uint8_t* code = codes + i * code_bytes();
    sketch_.reconstruct(code, out + i * d);
    core::simd::scale(out + i * d, base::bf16_to_f32(detail::read_u16(code + sketch_.sign_bytes())), d);
  }
}

PreparedQuery Qjl::prepare_query(const float* query) const {
  PreparedQuery prepared;
  sketch_.prepare(query, prepared.rotated, prepared.lut);
  prepared.scale = kSqrtHalfPi / static_cast<float>(sketch_.m());
  return prepared;
}

void Qjl::score(const PreparedQuery& query, const uint8_t* codes, std::size_t n, float* scores) const {
  for (std::size_t i = 0; i < n; ++i) {
    const uint8_t* code = codes + i * code_bytes();
    const float norm = base::bf16_to_f32(detail::read_u16(code + sketch_.sign_bytes()));
    scores[i] = query.scale * norm * sketch_.signed_sum(query.lut, code);
  }
}

}  // namespace veloxquant::quant
