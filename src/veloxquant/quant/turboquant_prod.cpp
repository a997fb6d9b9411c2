#include "veloxquant/quant/turboquant_prod.h"

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "base/half.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/core/simd_kernels.h"
#include "veloxquant/errors.h"
#include "veloxquant/quant/code_io.h"

namespace veloxquant::quant {
namespace {
const float kSqrtHalfPi = static_cast<float>(std::sqrt(std::numbers::pi / 2.0));
int mse_bits_for(int bits) {
  check_bits("turboquant_prod", bits, 1, 8);
  return bits > 1 ? bits - 1 : 1;  // the original's b_mse = max(b - 1, 1)
}
}  // namespace

TurboQuantProd::TurboQuantProd(int dim, int bits, uint64_t seed, int jl_dim)
    : bits_(bits),
      mse_((check_dim("turboquant_prod", dim), dim), mse_bits_for(bits), seed),
      sketch_(dim, jl_dim > 0 ? jl_dim : dim, seed) {
  if (jl_dim < 0)
    throw QuantizerConfigError("turboquant_prod: jl_dim must be positive (0 = default), got " + std::to_string(jl_dim));
}

void TurboQuantProd::encode(const float* x, std::size_t n, uint8_t* codes) const {
  const auto d = static_cast<std::size_t>(dim());
  thread_local std::vector<float> r;
  thread_local std::vector<uint8_t> idx;
  r.resize(d);
  idx.resize(d);
  const std::size_t ib = mse_.index_bytes(), sb = sketch_.sign_bytes();
  for (std::size_t i = 0; i < n; ++i) {
    uint8_t* code = codes + i * code_bytes();
    const float norm = mse_.encode_rotated(x + i * d, r.data(), code);
    core::unpack_dense(code, d, mse_.bits(), idx.data());
    double gamma_sq = 0.0;
    for (std::size_t j = 0; j < d; ++j) {
      r[j] -= mse_.codebook().centroids[idx[j]];
      gamma_sq += static_cast<double>(r[j]) * r[j];
    }
    sketch_.encode_signs(r.data(), code + ib);
    detail::write_u16(code + ib + sb, base::f32_to_bf16(norm));
    detail::write_u16(code + ib + sb + 2, base::f32_to_f16(static_cast<float>(std::sqrt(gamma_sq))));
  }
}

void TurboQuantProd::decode(const uint8_t* codes, std::size_t n, float* out) const {
  // x_hat = norm * Pi^T (c[idx] + gamma * sqrt(pi/2)/m * S^T signs): the vector whose inner
  // product with any query is the estimator.
  const auto d = static_cast<std::size_t>(dim());
  thread_local std::vector<uint8_t> idx;
  thread_local std::vector<float> resid;
  idx.resize(d);
  resid.resize(d);
  const std::size_t ib = mse_.index_bytes(), sb = sketch_.sign_bytes();
  for (std::size_t i = 0; i < n; ++i) {
    const uint8_t* code = codes + i * code_bytes();
    float* o = out + i * d;
    core::unpack_dense(code, d, mse_.bits(), idx.data());
    sketch_.reconstruct(code + ib, resid.data());
    const float gamma = base::f16_to_f32(detail::read_u16(code + ib + sb + 2));
    for (std::size_t j = 0; j < d; ++j) o[j] = mse_.codebook().centroids[idx[j]] + gamma * resid[j];
    mse_.rotation().inverse(o, o);
    core::simd::scale(o, base::bf16_to_f32(detail::read_u16(code + ib + sb)), d);
  }
}

PreparedQuery TurboQuantProd::prepare_query(const float* query) const {
  PreparedQuery prepared = mse_.prepare_query(query);
  // The sign LUT follows the MSE LUT (if any) in prepared.lut.
  std::vector<float> sketched, sign_lut;
  sketch_.prepare(prepared.rotated.data(), sketched, sign_lut);
  prepared.lut_offset = prepared.lut.size();
  prepared.lut.insert(prepared.lut.end(), sign_lut.begin(), sign_lut.end());
  prepared.scale = kSqrtHalfPi / static_cast<float>(sketch_.m());
  return prepared;
}

void TurboQuantProd::score(const PreparedQuery& query, const uint8_t* codes, std::size_t n, float* scores) const {
  const std::size_t ib = mse_.index_bytes(), sb = sketch_.sign_bytes();
  const float* sign_lut = query.lut.data() + query.lut_offset;
  for (std::size_t i = 0; i < n; ++i) {
    const uint8_t* code = codes + i * code_bytes();
    const float norm = base::bf16_to_f32(detail::read_u16(code + ib + sb));
    const float gamma = base::f16_to_f32(detail::read_u16(code + ib + sb + 2));
    const float mse_part = mse_.score_indices(query, code);
    const float qjl_part = core::simd::lut_sum(sign_lut, code + ib, sb);
    scores[i] = norm * (mse_part + gamma * query.scale * qjl_part);
  }
}

}  // namespace veloxquant::quant
