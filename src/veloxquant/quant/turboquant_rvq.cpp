#include "veloxquant/quant/turboquant_rvq.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/half.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/core/simd_kernels.h"
#include "veloxquant/errors.h"
#include "veloxquant/quant/code_io.h"

namespace veloxquant::quant {
namespace {

constexpr float kNormFloor = 1e-4f;  // the original's "safe norm"

}  // namespace

RvqStage2Scale parse_rvq_stage2_scale(const std::string& name) {
  if (name == "matched") return RvqStage2Scale::kMatched;
  if (name == "original") return RvqStage2Scale::kOriginal;
  throw QuantizerConfigError("rvq_stage2_scale must be 'matched' or 'original', got '" + name + "'");
}

const char* rvq_stage2_scale_name(RvqStage2Scale scale) {
  return scale == RvqStage2Scale::kMatched ? "matched" : "original";
}

TurboQuantRvq::TurboQuantRvq(int dim, int bits, uint64_t seed, RvqStage2Scale stage2)
    : dim_((check_dim("turboquant_rvq", dim), dim)),
      bits_((check_bits("turboquant_rvq", bits, 1, 8), bits)),
      stream_bytes_(core::dense_bytes(static_cast<std::size_t>(dim), bits)),
      rotation_(dim, seed),
      stage1_(&core::lloyd_max_codebook(core::coordinate_distribution(dim), dim, bits)),
      stage2_(&core::lloyd_max_codebook(
          stage2 == RvqStage2Scale::kMatched ? core::Distribution::kLaplacianMatched : core::Distribution::kLaplacian,
          dim, bits)),
      byte_lut_(bits == 1 || bits == 2 || bits == 4 || bits == 8) {}

std::size_t TurboQuantRvq::accounted_bytes_per_vector() const {
  return (2 * static_cast<std::size_t>(dim_) * static_cast<std::size_t>(bits_) + 7) / 8 + 2;
}

void TurboQuantRvq::encode_one(const float* x, uint8_t* s1, uint8_t* s2, uint16_t* norm_out) const {
  const auto d = static_cast<std::size_t>(dim_);
  thread_local std::vector<float> r, resid;
  thread_local std::vector<uint8_t> i1, i2;
  r.resize(d);
  resid.resize(d);
  i1.resize(d);
  i2.resize(d);
  double sq = 0.0;
  for (std::size_t j = 0; j < d; ++j) sq += static_cast<double>(x[j]) * x[j];
  const float norm = std::max(static_cast<float>(std::sqrt(sq)), kNormFloor);
  const float inv = 1.0f / norm;
  for (std::size_t j = 0; j < d; ++j) r[j] = x[j] * inv;
  rotation_.forward(r.data(), r.data());
  stage1_->quantize(r.data(), d, i1.data());
  for (std::size_t j = 0; j < d; ++j) resid[j] = r[j] - stage1_->centroids[i1[j]];
  stage2_->quantize(resid.data(), d, i2.data());
  core::pack_dense(i1.data(), d, bits_, s1);
  core::pack_dense(i2.data(), d, bits_, s2);
  *norm_out = base::f32_to_bf16(norm);
}

void TurboQuantRvq::decode_one(const uint8_t* s1, const uint8_t* s2, uint16_t norm, float* out) const {
  const auto d = static_cast<std::size_t>(dim_);
  thread_local std::vector<uint8_t> i1, i2;
  i1.resize(d);
  i2.resize(d);
  core::unpack_dense(s1, d, bits_, i1.data());
  core::unpack_dense(s2, d, bits_, i2.data());
  for (std::size_t j = 0; j < d; ++j) out[j] = stage1_->centroids[i1[j]] + stage2_->centroids[i2[j]];
  rotation_.inverse(out, out);
  core::simd::scale(out, base::bf16_to_f32(norm), d);
}

void TurboQuantRvq::encode_streams(const float* x, std::size_t n, uint8_t* stage1, uint8_t* stage2,
                                   uint16_t* norms_bf16) const {
  const auto d = static_cast<std::size_t>(dim_);
  for (std::size_t i = 0; i < n; ++i)
    encode_one(x + i * d, stage1 + i * stream_bytes_, stage2 + i * stream_bytes_, norms_bf16 + i);
}

void TurboQuantRvq::decode_streams(const uint8_t* stage1, const uint8_t* stage2, const uint16_t* norms_bf16,
                                   std::size_t n, float* out) const {
  const auto d = static_cast<std::size_t>(dim_);
  for (std::size_t i = 0; i < n; ++i)
    decode_one(stage1 + i * stream_bytes_, stage2 + i * stream_bytes_, norms_bf16[i], out + i * d);
}

PreparedQuery TurboQuantRvq::prepare_query(const float* query) const {
  const auto d = static_cast<std::size_t>(dim_);
  PreparedQuery prepared;
  prepared.rotated.resize(d);
  rotation_.forward(query, prepared.rotated.data());
  if (byte_lut_) {
    // Two tables back to back: stage 1 for bytes [0, sb), stage 2 for [sb, 2 sb), so one
    // lut_sum over a [stage1 | stage2] code covers both streams.
    prepared.lut.resize(2 * stream_bytes_ * 256);
    detail::build_byte_lut(prepared.rotated.data(), d, bits_, stage1_->centroids.data(), stream_bytes_,
                           prepared.lut.data());
    detail::build_byte_lut(prepared.rotated.data(), d, bits_, stage2_->centroids.data(), stream_bytes_,
                           prepared.lut.data() + stream_bytes_ * 256);
  }
  return prepared;
}

float TurboQuantRvq::score_one(const PreparedQuery& query, const uint8_t* s1, const uint8_t* s2,
                               uint16_t norm_bf16) const {
  const float norm = base::bf16_to_f32(norm_bf16);
  if (byte_lut_) {
    return norm * (core::simd::lut_sum(query.lut.data(), s1, stream_bytes_) +
                   core::simd::lut_sum(query.lut.data() + stream_bytes_ * 256, s2, stream_bytes_));
  }
  // b = 3, 5, 6, 7: indices straddle bytes; unpack and look the centroids up per coordinate.
  const auto d = static_cast<std::size_t>(dim_);
  thread_local std::vector<uint8_t> i1, i2;
  i1.resize(d);
  i2.resize(d);
  core::unpack_dense(s1, d, bits_, i1.data());
  core::unpack_dense(s2, d, bits_, i2.data());
  const float* q = query.rotated.data();
  const float* c1 = stage1_->centroids.data();
  const float* c2 = stage2_->centroids.data();
  float sum = 0.0f;
  for (std::size_t j = 0; j < d; ++j) sum += q[j] * (c1[i1[j]] + c2[i2[j]]);
  return norm * sum;
}

void TurboQuantRvq::score_streams(const PreparedQuery& query, const uint8_t* stage1, const uint8_t* stage2,
                                  const uint16_t* norms_bf16, std::size_t n, float* scores) const {
  for (std::size_t i = 0; i < n; ++i)
    scores[i] = score_one(query, stage1 + i * stream_bytes_, stage2 + i * stream_bytes_, norms_bf16[i]);
}

using detail::read_u16;
using detail::write_u16;

void TurboQuantRvq::encode(const float* x, std::size_t n, uint8_t* codes) const {
  const auto d = static_cast<std::size_t>(dim_);
  for (std::size_t i = 0; i < n; ++i) {
    uint8_t* code = codes + i * code_bytes();
    uint16_t norm;
    encode_one(x + i * d, code, code + stream_bytes_, &norm);
    write_u16(code + 2 * stream_bytes_, norm);
  }
}

void TurboQuantRvq::decode(const uint8_t* codes, std::size_t n, float* out) const {
  const auto d = static_cast<std::size_t>(dim_);
  for (std::size_t i = 0; i < n; ++i) {
    const uint8_t* code = codes + i * code_bytes();
    decode_one(code, code + stream_bytes_, read_u16(code + 2 * stream_bytes_), out + i * d);
  }
}

void TurboQuantRvq::score(const PreparedQuery& query, const uint8_t* codes, std::size_t n, float* scores) const {
  const std::size_t stride = code_bytes();
  if (byte_lut_) {
    // [stage1 | stage2] is contiguous here: one pass over 2 * stream_bytes table reads.
    for (std::size_t i = 0; i < n; ++i) {
      const uint8_t* code = codes + i * stride;
      scores[i] = base::bf16_to_f32(read_u16(code + 2 * stream_bytes_)) *
                  core::simd::lut_sum(query.lut.data(), code, 2 * stream_bytes_);
    }
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const uint8_t* code = codes + i * stride;
    scores[i] = score_one(query, code, code + stream_bytes_, read_u16(code + 2 * stream_bytes_));
  }
}

}  // namespace veloxquant::quant
