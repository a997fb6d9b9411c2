#include "veloxquant/quant/quant_eval.h"

#include <chrono>
#include <cmath>
#include <string>

#include "veloxquant/core/distortion_stats.h"
#include "veloxquant/core/rng.h"
#include "veloxquant/errors.h"

namespace veloxquant::quant {
namespace {
constexpr uint64_t kDataStream = 100;  // derive_seed purpose: evaluation data

void normalise(float* v, std::size_t d) {
  double sq = 0.0;
  for (std::size_t j = 0; j < d; ++j) sq += static_cast<double>(v[j]) * v[j];
  const double inv = 1.0 / std::sqrt(sq);
  for (std::size_t j = 0; j < d; ++j) v[j] = static_cast<float>(v[j] * inv);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

UnitPairs draw_unit_pairs(int dim, std::size_t n, uint64_t seed) {
  if (dim < 2) throw QuantizerConfigError("quant-eval: dim must be >= 2, got " + std::to_string(dim));
  if (n == 0) throw QuantizerConfigError("quant-eval: n must be positive, got 0");
  const auto d = static_cast<std::size_t>(dim);
  UnitPairs pairs;
  pairs.dim = dim;
  pairs.n = n;
  pairs.x.resize(n * d);
  pairs.y.resize(n * d);
  core::Rng rng(core::derive_seed(seed, kDataStream));
  std::vector<double> z(d);
  for (std::size_t i = 0; i < n; ++i) {
    float* x = &pairs.x[i * d];
    for (std::size_t j = 0; j < d; ++j) x[j] = static_cast<float>(rng.normal());
    normalise(x, d);
    // z: Gaussian, minus its component along x (in double), normalised.
    double along = 0.0;
    for (std::size_t j = 0; j < d; ++j) {
      z[j] = rng.normal();
      along += z[j] * x[j];
    }
    double sq = 0.0;
    for (std::size_t j = 0; j < d; ++j) {
      z[j] -= along * x[j];
      sq += z[j] * z[j];
    }
    const double inv = 1.0 / std::sqrt(sq);
    float* y = &pairs.y[i * d];
    for (std::size_t j = 0; j < d; ++j) y[j] = static_cast<float>(0.6 * x[j] + 0.8 * z[j] * inv);
  }
  return pairs;
}

QuantEvalResult evaluate_quantizer(const Quantizer& quantizer, std::size_t n, uint64_t seed) {
  const int dim = quantizer.dim();
  const auto d = static_cast<std::size_t>(dim);
  const UnitPairs pairs = draw_unit_pairs(dim, n, seed);
  const std::size_t cb = quantizer.code_bytes();
  std::vector<uint8_t> codes(n * cb);

  auto start = std::chrono::steady_clock::now();
  quantizer.encode(pairs.x.data(), n, codes.data());
  const double encode_s = seconds_since(start);

  std::vector<float> decoded(n * d);
  quantizer.decode(codes.data(), n, decoded.data());
  core::DistortionStats stats;
  for (std::size_t i = 0; i < n; ++i) {
    stats.add_reconstruction(&pairs.x[i * d], &decoded[i * d], d);
    const PreparedQuery q = quantizer.prepare_query(&pairs.y[i * d]);
    float est;
    quantizer.score(q, &codes[i * cb], 1, &est);
    double truth = 0.0;
    for (std::size_t j = 0; j < d; ++j) truth += static_cast<double>(pairs.y[i * d + j]) * pairs.x[i * d + j];
    stats.add_inner_product(est, truth);
  }

  // Throughput of scoring: one prepared query against every code, repeated to >= 20 ms.
  const PreparedQuery q0 = quantizer.prepare_query(&pairs.y[0]);
  std::vector<float> scores(n);
  std::size_t scored = 0;
  start = std::chrono::steady_clock::now();
  double score_s = 0.0;
  do {
    quantizer.score(q0, codes.data(), n, scores.data());
    scored += n;
    score_s = seconds_since(start);
  } while (score_s < 0.02);

  QuantEvalResult r;
  r.method = quantizer.method();
  r.bits = quantizer.bits();
  r.dim = dim;
  r.n = n;
  r.mse = stats.mse();
  r.ip_bias = stats.ip_bias();
  r.ip_bias_se = stats.ip_bias_se();
  r.ip_var_scaled = static_cast<double>(dim) * stats.ip_mse();
  r.shrink = stats.shrink();
  r.bytes_per_vector = cb;
  r.encode_vectors_per_s = encode_s > 0 ? static_cast<double>(n) / encode_s : 0.0;
  r.score_vectors_per_s = score_s > 0 ? static_cast<double>(scored) / score_s : 0.0;
  return r;
}

QuantEvalResult evaluate_quantizer(const std::string& method, int bits, int dim, std::size_t n, uint64_t seed) {
  const auto quantizer = make_quantizer(method, dim, bits, seed);
  return evaluate_quantizer(*quantizer, n, seed);
}

}  // namespace veloxquant::quant
