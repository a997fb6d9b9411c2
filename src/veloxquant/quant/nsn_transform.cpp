#include "veloxquant/quant/nsn_transform.h"

#include <cmath>

#include "base/half.h"
#include "veloxquant/core/hadamard.h"
#include "veloxquant/core/rng.h"
#include "veloxquant/errors.h"

namespace veloxquant::quant {

namespace {
constexpr uint64_t kSignStream = 0x45e2;  // derive_seed purpose: the rotation's signs
}  // namespace

NsnTransform::NsnTransform(int64_t d, uint64_t seed, std::shared_ptr<const NsnCodebook> codebook)
    : d_(d), book_(std::move(codebook)) {
  m_ = d > 0 && d <= (int64_t{1} << 20) ? core::hadamard_factor_of(static_cast<int>(d)) : 0;
  if (m_ == 0) {
    throw QuantizerConfigError("nsnquant: head_dim " + std::to_string(d) +
                               " has no Hadamard rotation (it must be m * 2^k with m in {1, 12, 20, 28})");
  }
  if (d % book_->dim() != 0) {
    throw QuantizerConfigError("nsnquant: nsn_subvector_dim " + std::to_string(book_->dim()) +
                               " does not divide head_dim " + std::to_string(d));
  }
  inv_sqrt_d_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  core::Rng rng(core::derive_seed(seed, kSignStream));
  signs_.resize(static_cast<std::size_t>(d));
  for (float& s : signs_) s = static_cast<float>(rng.sign());
}

void NsnTransform::rotate(const float* x, float* r) const {
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<std::size_t>(d_));
  for (int64_t i = 0; i < d_; ++i) r[i] = signs_[static_cast<std::size_t>(i)] * x[i];
  core::hadamard_transform(r, m_, static_cast<std::size_t>(d_ / m_), false, scratch.data());
  for (int64_t i = 0; i < d_; ++i) r[i] *= inv_sqrt_d_;
}

void NsnTransform::unrotate(const float* r, float* x) const {
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<std::size_t>(d_));
  if (x != r) std::copy(r, r + d_, x);
  core::hadamard_transform(x, m_, static_cast<std::size_t>(d_ / m_), true, scratch.data());
  for (int64_t i = 0; i < d_; ++i) x[i] = signs_[static_cast<std::size_t>(i)] * (x[i] * inv_sqrt_d_);
}

void NsnTransform::encode_chunk(const float* rows, int64_t n, uint8_t* codes, int64_t code_stride, uint16_t* scales,
                                int64_t scale_stride, uint16_t* mean) const {
  const std::size_t d = static_cast<std::size_t>(d_);
  const double sqrt_d = std::sqrt(static_cast<double>(d_));
  thread_local std::vector<float> u, z;
  thread_local std::vector<double> n1;
  u.resize(static_cast<std::size_t>(n) * d);
  z.resize(d);
  n1.resize(static_cast<std::size_t>(n));
  // Normalize: each rotated row onto the sphere of radius sqrt(d).
  for (int64_t j = 0; j < n; ++j) {
    float* uj = u.data() + static_cast<std::size_t>(j) * d;
    rotate(rows + static_cast<std::size_t>(j) * d, uj);
    double ss = 0.0;
    for (std::size_t i = 0; i < d; ++i) ss += static_cast<double>(uj[i]) * static_cast<double>(uj[i]);
    const double norm = std::sqrt(ss);
    n1[static_cast<std::size_t>(j)] = norm;
    const double f = norm > 0.0 ? sqrt_d / norm : 0.0;
    for (std::size_t i = 0; i < d; ++i) uj[i] = static_cast<float>(static_cast<double>(uj[i]) * f);
  }
  // Shift: the chunk's per-channel mean, rounded to f16 before it is subtracted (the stored mean
  // is the one the reconstruction adds back).
  for (std::size_t i = 0; i < d; ++i) {
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) sum += static_cast<double>(u[static_cast<std::size_t>(j) * d + i]);
    mean[i] = base::f32_to_f16(static_cast<float>(sum / static_cast<double>(n)));
  }
  const int sub = book_->dim(), stages = book_->stages();
  for (int64_t j = 0; j < n; ++j) {
    const float* uj = u.data() + static_cast<std::size_t>(j) * d;
    double ss = 0.0;
    for (std::size_t i = 0; i < d; ++i) {
      z[i] = uj[i] - base::f16_to_f32(mean[i]);
      ss += static_cast<double>(z[i]) * static_cast<double>(z[i]);
    }
    // Normalize again: coordinates ~ N(0, 1), the codebook's training distribution.
    const double n2 = std::sqrt(ss);
    const double f = n2 > 0.0 ? sqrt_d / n2 : 0.0;
    for (std::size_t i = 0; i < d; ++i) z[i] = static_cast<float>(static_cast<double>(z[i]) * f);
    uint8_t* cj = codes + j * code_stride;
    for (int64_t s = 0; s < subvectors(); ++s) book_->encode(z.data() + s * sub, cj + s * stages);
    const double norm1 = n1[static_cast<std::size_t>(j)];
    scales[j * scale_stride] = base::f32_to_f16(static_cast<float>(norm1 * n2 / static_cast<double>(d_)));
    scales[j * scale_stride + 1] = base::f32_to_f16(static_cast<float>(norm1 / sqrt_d));
  }
}

void NsnTransform::decode_rotated(const uint8_t* codes, const uint16_t* scales, const float* mean, float* out) const {
  const float a = base::f16_to_f32(scales[0]), b = base::f16_to_f32(scales[1]);
  const int sub = book_->dim(), stages = book_->stages();
  for (int64_t s = 0; s < subvectors(); ++s) book_->decode(codes + s * stages, out + s * sub);
  for (int64_t i = 0; i < d_; ++i) out[i] = a * out[i] + b * mean[i];
}

}  // namespace veloxquant::quant
