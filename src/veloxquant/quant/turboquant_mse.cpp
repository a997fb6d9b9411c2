#include "veloxquant/quant/turboquant_mse.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/half.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/core/simd_kernels.h"
#include "veloxquant/quant/code_io.h"

namespace veloxquant::quant {

TurboQuantMse::TurboQuantMse(int dim, int bits, uint64_t seed)
    : dim_((check_dim("turboquant_mse", dim), dim)),
      bits_((check_bits("turboquant_mse", bits, 1, 8), bits)),
      index_bytes_(core::dense_bytes(static_cast<std::size_t>(dim), bits)),
      rotation_(dim, seed),
      codebook_(&core::lloyd_max_codebook(core::coordinate_distribution(dim), dim, bits)) {}

float TurboQuantMse::encode_rotated(const float* x, float* rotated, uint8_t* packed) const {
  const auto d = static_cast<std::size_t>(dim_);
  thread_local std::vector<uint8_t> idx;
  idx.resize(d);
  double sq = 0.0;
  for (std::size_t j = 0; j < d; ++j) sq += static_cast<double>(x[j]) * x[j];
  const float norm = std::max(static_cast<float>(std::sqrt(sq)), 1e-30f);
  for (std::size_t j = 0; j < d; ++j) rotated[j] = x[j] / norm;
  rotation_.forward(rotated, rotated);
  codebook_->quantize(rotated, d, idx.data());
  core::pack_dense(idx.data(), d, bits_, packed);
  return norm;
}

void TurboQuantMse::encode(const float* x, std::size_t n, uint8_t* codes) const {
  const auto d = static_cast<std::size_t>(dim_);
  thread_local std::vector<float> r;
  r.resize(d);
  for (std::size_t i = 0; i < n; ++i) {
    uint8_t* code = codes + i * code_bytes();
    const float norm = encode_rotated(x + i * d, r.data(), code);
    detail::write_u16(code + index_bytes_, base::f32_to_bf16(norm));
  }
}

void TurboQuantMse::decode(const uint8_t* codes, std::size_t n, float* out) const {
  const auto d = static_cast<std::size_t>(dim_);
  thread_local std::vector<uint8_t> idx;
  idx.resize(d);
  for (std::size_t i = 0; i < n; ++i) {
    const uint8_t* code = codes + i * code_bytes();
    float* o = out + i * d;
    core::unpack_dense(code, d, bits_, idx.data());
    for (std::size_t j = 0; j < d; ++j) o[j] = codebook_->centroids[idx[j]];
    rotation_.inverse(o, o);
    core::simd::scale(o, base::bf16_to_f32(detail::read_u16(code + index_bytes_)), d);
  }
}

void TurboQuantMse::fill_lut(PreparedQuery& query) const {
  if (!detail::byte_aligned_bits(bits_)) return;
  query.lut.resize(index_bytes_ * 256);
  detail::build_byte_lut(query.rotated.data(), static_cast<std::size_t>(dim_), bits_, codebook_->centroids.data(),
                         index_bytes_, query.lut.data());
}

PreparedQuery TurboQuantMse::prepare_query(const float* query) const {
  PreparedQuery prepared;
  prepared.rotated.resize(static_cast<std::size_t>(dim_));
  rotation_.forward(query, prepared.rotated.data());
  fill_lut(prepared);
  return prepared;
}

float TurboQuantMse::score_indices(const PreparedQuery& query, const uint8_t* packed) const {
  if (detail::byte_aligned_bits(bits_)) return core::simd::lut_sum(query.lut.data(), packed, index_bytes_);
  const auto d = static_cast<std::size_t>(dim_);
  thread_local std::vector<uint8_t> idx;
  idx.resize(d);
  core::unpack_dense(packed, d, bits_, idx.data());
  float sum = 0.0f;
  for (std::size_t j = 0; j < d; ++j) sum += query.rotated[j] * codebook_->centroids[idx[j]];
  return sum;
}

void TurboQuantMse::score(const PreparedQuery& query, const uint8_t* codes, std::size_t n, float* scores) const {
  for (std::size_t i = 0; i < n; ++i) {
    const uint8_t* code = codes + i * code_bytes();
    scores[i] = base::bf16_to_f32(detail::read_u16(code + index_bytes_)) * score_indices(query, code);
  }
}

}  // namespace veloxquant::quant
