#include "veloxquant/quant/polar.h"

#include <cmath>
#include <numbers>
#include <string>

#include "base/half.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/core/lloyd_max.h"
#include "veloxquant/core/simd_kernels.h"
#include "veloxquant/errors.h"
#include "veloxquant/quant/code_io.h"

namespace veloxquant::quant {
namespace {
int checked_polar_dim(int dim) {
  check_dim("polar", dim);
  if (dim % 16 != 0)
    throw QuantizerConfigError("polar: head_dim must be divisible by 16 (4 polar levels), got " + std::to_string(dim));
  return dim;
}
}  // namespace

Polar::Polar(int dim, int bits, uint64_t seed)
    : dim_(checked_polar_dim(dim)),
      bits_((check_bits("polar", bits, 1, 6), bits)),
      blocks_(static_cast<std::size_t>(dim) / 16),
      rotation_(dim, seed) {
  std::size_t offset = 0;
  for (int level = 1; level <= kLevels; ++level) {
    const int b = level == 1 ? bits + 2 : bits;
    level_bits_[level - 1] = b;
    const core::Codebook& book = level == 1
                                     ? core::lloyd_max_codebook(core::Distribution::kUniformAngle, 0, b)
                                     : core::lloyd_max_codebook(core::Distribution::kPolarAngle, 1 << (level - 1), b);
    boundaries_[level - 1] = &book.boundaries;
    for (float c : book.centroids) {
      cos_[level - 1].push_back(std::cos(c));
      sin_[level - 1].push_back(std::sin(c));
    }
    level_offset_[level - 1] = offset;
    offset += core::dense_bytes(static_cast<std::size_t>(dim) >> level, b);
  }
  angle_bytes_ = offset;
}

void Polar::encode(const float* x, std::size_t n, uint8_t* codes) const {
  const auto d = static_cast<std::size_t>(dim_);
  thread_local std::vector<float> cur, next, angle;
  thread_local std::vector<uint8_t> idx;
  for (std::size_t i = 0; i < n; ++i) {
    uint8_t* code = codes + i * code_bytes();
    cur.assign(x + i * d, x + (i + 1) * d);
    rotation_.forward(cur.data(), cur.data());
    for (int level = 1; level <= kLevels; ++level) {
      const std::size_t pairs = d >> level;
      next.resize(pairs);
      angle.resize(pairs);
      idx.resize(pairs);
      for (std::size_t p = 0; p < pairs; ++p) {
        const float a = cur[2 * p], b = cur[2 * p + 1];
        next[p] = std::hypot(a, b);
        float psi = std::atan2(b, a);
        if (level == 1 && psi < 0.0f) psi += 2.0f * std::numbers::pi_v<float>;
        angle[p] = psi;
      }
      const auto& bounds = *boundaries_[level - 1];
      core::simd::count_below(angle.data(), pairs, bounds.data(), bounds.size(), idx.data());
      core::pack_dense(idx.data(), pairs, level_bits_[level - 1], code + level_offset_[level - 1]);
      cur.swap(next);
    }
    for (std::size_t b = 0; b < blocks_; ++b) detail::write_u16(code + angle_bytes_ + 2 * b, base::f32_to_bf16(cur[b]));
  }
}

void Polar::decode_rotated(const uint8_t* code, float* y) const {
  const auto d = static_cast<std::size_t>(dim_);
  thread_local std::vector<float> cur, next;
  thread_local std::vector<uint8_t> idx;
  cur.resize(blocks_);
  for (std::size_t b = 0; b < blocks_; ++b) cur[b] = base::bf16_to_f32(detail::read_u16(code + angle_bytes_ + 2 * b));
  for (int level = kLevels; level >= 1; --level) {
    const std::size_t pairs = d >> level;
    idx.resize(pairs);
    core::unpack_dense(code + level_offset_[level - 1], pairs, level_bits_[level - 1], idx.data());
    float* out = level == 1 ? y : (next.resize(2 * pairs), next.data());
    const auto& c = cos_[level - 1];
    const auto& s = sin_[level - 1];
    for (std::size_t p = 0; p < pairs; ++p) {
      out[2 * p] = cur[p] * c[idx[p]];
      out[2 * p + 1] = cur[p] * s[idx[p]];
    }
    if (level > 1) cur.swap(next);
  }
}

void Polar::decode(const uint8_t* codes, std::size_t n, float* out) const {
  const auto d = static_cast<std::size_t>(dim_);
  for (std::size_t i = 0; i < n; ++i) {
    decode_rotated(codes + i * code_bytes(), out + i * d);
    rotation_.inverse(out + i * d, out + i * d);
  }
}

PreparedQuery Polar::prepare_query(const float* query) const {
  PreparedQuery prepared;
  prepared.rotated.resize(static_cast<std::size_t>(dim_));
  rotation_.forward(query, prepared.rotated.data());
  return prepared;
}

void Polar::score(const PreparedQuery& query, const uint8_t* codes, std::size_t n, float* scores) const {
  const auto d = static_cast<std::size_t>(dim_);
  thread_local std::vector<float> y;
  y.resize(d);
  for (std::size_t i = 0; i < n; ++i) {
    decode_rotated(codes + i * code_bytes(), y.data());
    scores[i] = core::simd::dot(query.rotated.data(), y.data(), d);
  }
}

}  // namespace veloxquant::quant
