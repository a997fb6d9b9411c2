#include "veloxquant/caches/spectral_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/half.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/core/rng.h"
#include "veloxquant/errors.h"

namespace veloxquant {
namespace {

int noise_dims(const KVCacheConfig& c) {
  return std::max(0, c.head_dim - std::min(c.head_dim, c.spectral.spectral_key_d_eff));
}
int sketch_dims(const KVCacheConfig& c) {
  if (!c.spectral.spectral_apply_qjl || noise_dims(c) == 0) return 0;
  return c.jl_dim.value_or(noise_dims(c));
}

// A 1-d "unit vector" is +-1; the Beta density needs d >= 2, so a single noise coordinate uses
// the Gaussian table (its sign is what the 1-bit level captures).
core::Distribution noise_distribution(int dn) {
  return dn >= 2 ? core::coordinate_distribution(dn) : core::Distribution::kGaussian;
}

}  // namespace

void symmetric_eigen(std::vector<double> a, int n, std::vector<double>& eigenvalues,
                     std::vector<double>& eigenvectors) {
  std::vector<double> v(static_cast<std::size_t>(n) * n, 0.0);
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i) * n + i] = 1.0;
  auto at = [&](int r, int c) -> double& { return a[static_cast<std::size_t>(r) * n + c]; };
  double total = 0.0;
  for (double x : a) total += x * x;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0.0;
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q) off += at(p, q) * at(p, q);
    if (off <= 1e-24 * std::max(total, 1e-300)) break;
    for (int p = 0; p < n; ++p) {
      for (int q = p + 1; q < n; ++q) {
        if (at(p, q) == 0.0) continue;
        // The classic Jacobi rotation that zeroes a[p][q] (Golub & Van Loan, Alg. 8.4.2).
        const double theta = (at(q, q) - at(p, p)) / (2.0 * at(p, q));
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1.0));
        const double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
        for (int k = 0; k < n; ++k) {
          const double akp = at(k, p), akq = at(k, q);
          at(k, p) = c * akp - s * akq;
          at(k, q) = s * akp + c * akq;
        }
        for (int k = 0; k < n; ++k) {
          const double apk = at(p, k), aqk = at(q, k);
          at(p, k) = c * apk - s * aqk;
          at(q, k) = s * apk + c * aqk;
        }
        for (int k = 0; k < n; ++k) {  // v holds eigenvectors as rows
          double& vp = v[static_cast<std::size_t>(p) * n + k];
          double& vq = v[static_cast<std::size_t>(q) * n + k];
          const double x = vp, y = vq;
          vp = c * x - s * y;
          vq = s * x + c * y;
        }
      }
    }
  }
  std::vector<int> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int i, int j) { return at(i, i) > at(j, j); });
  eigenvalues.assign(static_cast<std::size_t>(n), 0.0);
  eigenvectors.assign(static_cast<std::size_t>(n) * n, 0.0);
  for (int r = 0; r < n; ++r) {
    eigenvalues[static_cast<std::size_t>(r)] =
        at(order[static_cast<std::size_t>(r)], order[static_cast<std::size_t>(r)]);
    std::memcpy(&eigenvectors[static_cast<std::size_t>(r) * n],
                &v[static_cast<std::size_t>(order[static_cast<std::size_t>(r)]) * n],
                sizeof(double) * static_cast<std::size_t>(n));
  }
}

std::size_t SpectralCache::key_bytes(const KVCacheConfig& c) {
  const int d_eff = std::min(c.head_dim, c.spectral.spectral_key_d_eff);
  const int dn = noise_dims(c);
  const int m = sketch_dims(c);
  std::size_t bytes = static_cast<std::size_t>(d_eff) + 2;
  if (dn > 0) bytes += 2 + core::dense_bytes(static_cast<std::size_t>(dn), c.bit_width_inlier.scalar());
  if (m > 0) bytes += 2 + core::dense_bytes(static_cast<std::size_t>(m), 1);
  return bytes;
}

SpectralCache::SpectralCache(const KVCacheConfig& config)
    : StandaloneCacheBase(config, key_bytes(config)),
      d_eff_(std::min(config.head_dim, config.spectral.spectral_key_d_eff)),
      dn_(noise_dims(config)),
      bits_(config.bit_width_inlier.scalar()),
      m_(sketch_dims(config)),
      qjl_(m_ > 0),
      calib_tokens_(std::min<int64_t>(config.spectral.spectral_calib_tokens, capacity())) {
  if (config.spectral.spectral_key_d_eff < 0) {
    throw QuantizerConfigError("spectral_key_d_eff must be >= 0, got " +
                               std::to_string(config.spectral.spectral_key_d_eff));
  }
  if (m_ < 0 || (config.jl_dim && *config.jl_dim < 1)) {
    throw QuantizerConfigError("jl_dim must be >= 1, got " + std::to_string(config.jl_dim.value_or(0)));
  }
  if (dn_ > 0) {
    noise_rotation_.emplace(dn_, core::derive_seed(static_cast<uint64_t>(config.seed), 0x5bec7a1));
    codebook_ = &core::lloyd_max_codebook(noise_distribution(dn_), std::max(dn_, 1), bits_);
  }
  if (qjl_) {
    // The JL matrix of the original is drawn from seed + 1 (math/rotation.py make_jl_matrix).
    core::Rng rng(static_cast<uint64_t>(config.seed) + 1);
    jl_.resize(static_cast<std::size_t>(m_) * dn_);
    for (float& x : jl_) x = static_cast<float>(rng.normal());
  }
}

void SpectralCache::encode_key(const float* key, int64_t slot) {
  if (calibrated_) {
    encode_calibrated(key, slot);
    return;
  }
  // Token t < calib_tokens_ <= capacity sits in slot t; hold it until calibration.
  staged_.insert(staged_.end(), key, key + dim_);
  if (static_cast<int64_t>(staged_.size() / static_cast<std::size_t>(dim_)) == calib_tokens_) calibrate();
  (void)slot;
}

void SpectralCache::calibrate() {
  const std::size_t n = staged_.size() / static_cast<std::size_t>(dim_);
  std::vector<double> moment(static_cast<std::size_t>(dim_) * dim_, 0.0);
  for (std::size_t t = 0; t < n; ++t) {
    const float* k = &staged_[t * static_cast<std::size_t>(dim_)];
    for (int i = 0; i < dim_; ++i)
      for (int j = 0; j < dim_; ++j) moment[static_cast<std::size_t>(i) * dim_ + j] += double(k[i]) * k[j];
  }
  for (double& x : moment) x /= static_cast<double>(n);
  std::vector<double> vectors;
  symmetric_eigen(std::move(moment), dim_, eigenvalues_, vectors);
  basis_.assign(vectors.begin(), vectors.end());
  calibrated_ = true;
  const std::vector<float> held = std::move(staged_);
  staged_ = {};
  for (std::size_t t = 0; t < n; ++t)
    encode_calibrated(&held[t * static_cast<std::size_t>(dim_)], static_cast<int64_t>(t));
}

void SpectralCache::encode_calibrated(const float* key, int64_t slot) {
  std::vector<float> y(static_cast<std::size_t>(dim_), 0.0f);
  for (int i = 0; i < dim_; ++i) {
    double acc = 0.0;
    for (int j = 0; j < dim_; ++j) acc += double(basis_[static_cast<std::size_t>(i) * dim_ + j]) * key[j];
    y[static_cast<std::size_t>(i)] = static_cast<float>(acc);
  }
  uint8_t* out = key_slot(slot);
  // Signal: int8 with a per-token f16 scale.
  float max_abs = 0.0f;
  for (int i = 0; i < d_eff_; ++i) max_abs = std::max(max_abs, std::fabs(y[static_cast<std::size_t>(i)]));
  const uint16_t scale16 = base::f32_to_f16(std::max(max_abs / 127.0f, 1e-8f));
  const float scale = base::f16_to_f32(scale16);
  for (int i = 0; i < d_eff_; ++i) {
    const float c = scale > 0.0f ? std::nearbyint(y[static_cast<std::size_t>(i)] / scale) : 0.0f;
    out[i] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(c, -127.0f, 127.0f)));
  }
  std::memcpy(out + d_eff_, &scale16, 2);
  out += d_eff_ + 2;
  if (dn_ == 0) return;
  // Noise: rotate, unit-normalise, Lloyd-Max codes; the norm in f16.
  std::vector<float> z(static_cast<std::size_t>(dn_));
  noise_rotation_->forward(y.data() + d_eff_, z.data());
  double sq = 0.0;
  for (float v : z) sq += double(v) * v;
  const uint16_t norm16 = base::f32_to_f16(static_cast<float>(std::sqrt(sq)));
  const float norm = base::f16_to_f32(norm16);
  std::vector<float> unit(z.size());
  for (std::size_t i = 0; i < z.size(); ++i) unit[i] = norm > 0.0f ? z[i] / norm : 0.0f;
  std::vector<uint8_t> codes(z.size());
  codebook_->quantize(unit.data(), unit.size(), codes.data());
  std::memcpy(out, &norm16, 2);
  core::pack_dense(codes.data(), codes.size(), bits_, out + 2);
  out += 2 + core::dense_bytes(codes.size(), bits_);
  if (!qjl_) return;
  std::vector<float> residual(z.size());
  double rsq = 0.0;
  for (std::size_t i = 0; i < z.size(); ++i) {
    residual[i] = z[i] - norm * codebook_->centroids[codes[i]];
    rsq += double(residual[i]) * residual[i];
  }
  std::vector<uint8_t> signs(static_cast<std::size_t>(m_));
  for (int r = 0; r < m_; ++r) {
    double acc = 0.0;
    for (int j = 0; j < dn_; ++j)
      acc += double(jl_[static_cast<std::size_t>(r) * dn_ + j]) * residual[static_cast<std::size_t>(j)];
    signs[static_cast<std::size_t>(r)] = acc >= 0.0 ? 1 : 0;
  }
  const uint16_t rnorm16 = base::f32_to_f16(static_cast<float>(std::sqrt(rsq)));
  std::memcpy(out, &rnorm16, 2);
  core::pack_dense(signs.data(), signs.size(), 1, out + 2);
}

std::vector<float> SpectralCache::prepare_query(const float* query) const {
  if (!calibrated_) return std::vector<float>(query, query + dim_);
  // [signal coords (d_eff) | rotated noise coords (dn) | sketch S * noise (m)]
  std::vector<float> y(static_cast<std::size_t>(dim_));
  for (int i = 0; i < dim_; ++i) {
    double acc = 0.0;
    for (int j = 0; j < dim_; ++j) acc += double(basis_[static_cast<std::size_t>(i) * dim_ + j]) * query[j];
    y[static_cast<std::size_t>(i)] = static_cast<float>(acc);
  }
  std::vector<float> prepared(static_cast<std::size_t>(d_eff_ + dn_ + m_));
  std::copy(y.begin(), y.begin() + d_eff_, prepared.begin());
  if (dn_ > 0) noise_rotation_->forward(y.data() + d_eff_, prepared.data() + d_eff_);
  // The rotated noise part, then its JL sketch (the query side of the QJL estimator).
  const float* noise = prepared.data() + d_eff_;
  float* sketch = prepared.data() + d_eff_ + dn_;
  for (int r = 0; r < m_; ++r) {
    double acc = 0.0;
    for (int j = 0; j < dn_; ++j) acc += double(jl_[static_cast<std::size_t>(r) * dn_ + j]) * noise[j];
    sketch[r] = static_cast<float>(acc);
  }
  return prepared;
}

float SpectralCache::score(const std::vector<float>& prepared, int64_t slot) const {
  if (!calibrated_) {
    const float* k = &staged_[static_cast<std::size_t>(slot) * dim_];
    double acc = 0.0;
    for (int i = 0; i < dim_; ++i) acc += double(prepared[static_cast<std::size_t>(i)]) * k[i];
    return static_cast<float>(acc);
  }
  const uint8_t* in = key_slot(slot);
  uint16_t scale16;
  std::memcpy(&scale16, in + d_eff_, 2);
  const float scale = base::f16_to_f32(scale16);
  double acc = 0.0;
  for (int i = 0; i < d_eff_; ++i)
    acc += double(prepared[static_cast<std::size_t>(i)]) * static_cast<int8_t>(in[i]) * scale;
  in += d_eff_ + 2;
  if (dn_ == 0) return static_cast<float>(acc);
  uint16_t norm16;
  std::memcpy(&norm16, in, 2);
  std::vector<uint8_t> codes(static_cast<std::size_t>(dn_));
  core::unpack_dense(in + 2, codes.size(), bits_, codes.data());
  const float* noise_query = prepared.data() + d_eff_;
  double noise = 0.0;
  for (int j = 0; j < dn_; ++j)
    noise += double(noise_query[j]) * codebook_->centroids[codes[static_cast<std::size_t>(j)]];
  acc += noise * base::f16_to_f32(norm16);
  in += 2 + core::dense_bytes(codes.size(), bits_);
  if (!qjl_) return static_cast<float>(acc);
  uint16_t rnorm16;
  std::memcpy(&rnorm16, in, 2);
  std::vector<uint8_t> signs(static_cast<std::size_t>(m_));
  core::unpack_dense(in + 2, signs.size(), 1, signs.data());
  const float* sketch_query = prepared.data() + d_eff_ + dn_;
  double sketch = 0.0;
  for (int r = 0; r < m_; ++r) {
    const double s = sketch_query[r];
    sketch += signs[static_cast<std::size_t>(r)] ? s : -s;
  }
  // QJL estimator (arXiv 2406.03482 Lemma 3.2): <q, r> ~ sqrt(pi/2)/m * |r| * sum sign(S r) (S q).
  acc += std::sqrt(M_PI / 2.0) / m_ * base::f16_to_f32(rnorm16) * sketch;
  return static_cast<float>(acc);
}

void SpectralCache::score_keys(const float* query, const std::vector<SlotRange>& ranges, float* out) const {
  const std::vector<float> prepared = prepare_query(query);  // once per attend
  for (const SlotRange& range : ranges) {
    for (int64_t i = 0; i < range.count; ++i) *out++ = score(prepared, range.first + i);
  }
}

std::size_t SpectralCache::extra_bytes() const {
  // Calibration data this cache owns: held keys, the basis, eigenvalues and the JL matrix. The
  // Lloyd-Max codebook is shared process-wide; the noise rotation is d_n floats (Hadamard signs)
  // or 2 d_n^2 floats (Haar matrix and transpose).
  std::size_t rotation = 0;
  if (noise_rotation_) {
    rotation = noise_rotation_->kind() == core::RotationKind::kHadamard
                   ? sizeof(float) * static_cast<std::size_t>(dn_)
                   : 2 * sizeof(float) * static_cast<std::size_t>(dn_) * dn_;
  }
  return sizeof(float) * (staged_.capacity() + basis_.capacity() + jl_.capacity()) +
         sizeof(double) * eigenvalues_.capacity() + rotation;
}

void SpectralCache::reset() {
  StandaloneCacheBase::reset();
  // Token storage goes; the calibrated basis stays. Keys held before calibration are tokens.
  if (!calibrated_) staged_.clear();
}

std::unique_ptr<StandaloneCache> make_spectral_cache(const KVCacheConfig& config) {
  return std::make_unique<SpectralCache>(config);
}

}  // namespace veloxquant
