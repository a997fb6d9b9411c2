#include "veloxquant/core/lloyd_max.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <numbers>
#include <string>
#include <tuple>

#include "veloxquant/core/simd_kernels.h"
#include "veloxquant/errors.h"

namespace veloxquant::core {
namespace {

constexpr double kMinCellMass = 1e-12;

struct Density {
  double lo, hi;
  double start_lo, start_hi;          // where the linspace start is laid
  double (*pdf)(double x, double p);  // unnormalised
  double p;
};

double gaussian_pdf(double x, double sigma) { return std::exp(-0.5 * (x / sigma) * (x / sigma)); }
double beta_pdf(double x, double d) { return std::pow(std::max(0.0, 1.0 - x * x), (d - 3.0) / 2.0); }
double laplace_pdf(double x, double scale) { return std::exp(-std::abs(x) / scale); }
double uniform_pdf(double, double) { return 1.0; }
double polar_pdf(double psi, double n) {
  const double s = std::sin(psi) * std::cos(psi);
  return n == 1.0 ? 1.0 : std::pow(std::max(0.0, s), n - 1.0);
}

Density density_for(Distribution dist, int param, int bits, double laplacian_support) {
  switch (dist) {
    case Distribution::kGaussian: {
      const double sigma = 1.0 / std::sqrt(static_cast<double>(param));
      return {-6.0 * sigma, 6.0 * sigma, -6.0 * sigma, 6.0 * sigma, gaussian_pdf, sigma};
    }
    case Distribution::kBeta: {
      const double start = std::min(1.0 - 1e-6, 6.0 / std::sqrt(static_cast<double>(param)));
      return {-1.0 + 1e-6, 1.0 - 1e-6, -start, start, beta_pdf, static_cast<double>(param)};
    }
    case Distribution::kLaplacian:
    case Distribution::kLaplacianMatched: {
      const double scale = dist == Distribution::kLaplacian ? rvq_laplacian_scale(param, bits)
                                                            : rvq_matched_laplacian_scale(param, bits);
      const double half = laplacian_support * scale;
      return {-half, half, -half, half, laplace_pdf, scale};
    }
    case Distribution::kUniformAngle:
      return {0.0, 2.0 * std::numbers::pi, 0.0, 2.0 * std::numbers::pi, uniform_pdf, 0.0};
    case Distribution::kPolarAngle:
      return {0.0, std::numbers::pi / 2.0, 0.0, std::numbers::pi / 2.0, polar_pdf, static_cast<double>(param)};
  }
  throw QuantizerConfigError("lloyd_max: unknown distribution");
}

void validate(Distribution dist, int param, int bits) {
  if (bits < 1 || bits > 8) throw QuantizerConfigError("lloyd_max: bits must be in 1..8, got " + std::to_string(bits));
  const int min_param = dist == Distribution::kBeta || dist == Distribution::kLaplacianMatched ? 2 : 1;
  if (dist != Distribution::kUniformAngle && param < min_param)
    throw QuantizerConfigError(std::string("lloyd_max: ") + distribution_name(dist) +
                               " parameter (dimension) must be >= " + std::to_string(min_param) + ", got " +
                               std::to_string(param));
}

}  // namespace

const char* distribution_name(Distribution d) {
  switch (d) {
    case Distribution::kGaussian:
      return "gaussian";
    case Distribution::kBeta:
      return "beta";
    case Distribution::kLaplacian:
      return "laplacian";
    case Distribution::kLaplacianMatched:
      return "laplacian_matched";
    case Distribution::kUniformAngle:
      return "uniform_angle";
    case Distribution::kPolarAngle:
      return "polar_angle";
  }
  return "unknown";
}

double rvq_laplacian_scale(int dim, int bits) {
  const double sigma_q = std::sqrt(1.0 / dim) * (std::sqrt(3.0 * std::numbers::pi) / 2.0) * std::pow(4.0, -bits);
  return std::max(sigma_q / std::sqrt(2.0), 1e-6);
}

double rvq_matched_laplacian_scale(int dim, int bits) {
  // Solved directly (not through the codebook cache, whose lock the caller may hold); this
  // runs once per (d, b) because the stage-2 codebook built from it is cached.
  const Codebook stage1 = solve_lloyd_max(coordinate_distribution(dim), dim, bits);
  return std::max(std::sqrt(stage1.distortion / 2.0), 1e-6);
}

Distribution coordinate_distribution(int dim) { return dim >= 64 ? Distribution::kGaussian : Distribution::kBeta; }

// Cumulative trapezoid integrals of f, x f and x^2 f on the quadrature grid, evaluable at
// any t: inside a grid interval the integrands are interpolated linearly, so a cell edge that
// falls between two nodes cuts the interval exactly. (Assigning whole nodes to cells, the
// other reading of "trapezoid quadrature", makes the map from boundaries to centroids a step
// function: Lloyd then stalls on a discrete fixed point up to 4e-3 away from Max's levels.)
class Quadrature {
 public:
  Quadrature(const Density& density, int n) : lo_(density.lo), h_((density.hi - density.lo) / (n - 1)) {
    f_.resize(n);
    for (int i = 0; i < n; ++i) f_[i] = density.pdf(lo_ + h_ * i, density.p);
    for (int m = 0; m < 3; ++m) cum_[m].assign(n, 0.0);
    for (int i = 1; i < n; ++i)
      for (int m = 0; m < 3; ++m) cum_[m][i] = cum_[m][i - 1] + piece(i - 1, h_, m);
  }
  // integral of x^m f(x) from lo to t (t clamped to the support).
  double cumulative(double t, int m) const {
    const int n = static_cast<int>(f_.size());
    const double u = (t - lo_) / h_;
    if (u <= 0) return 0.0;
    if (u >= n - 1) return cum_[m][n - 1];
    const int i = static_cast<int>(u);
    return cum_[m][i] + piece(i, (u - i) * h_, m);
  }
  double total(int m) const { return cum_[m].back(); }

 private:
  // Trapezoid over [x_i, x_i + w] (w <= h) of x^m f with f interpolated linearly.
  double piece(int i, double w, int m) const {
    const double x0 = lo_ + h_ * i, x1 = x0 + w;
    const double f1 = f_[i] + (f_[i + 1] - f_[i]) * (w / h_);
    return 0.5 * w * (std::pow(x0, m) * f_[i] + std::pow(x1, m) * f1);
  }
  double lo_, h_;
  std::vector<double> f_;
  std::vector<double> cum_[3];
};

Codebook solve_lloyd_max(Distribution dist, int param, int bits, const LloydMaxOptions& options) {
  validate(dist, param, bits);
  if (!(options.laplacian_support > 0))
    throw QuantizerConfigError("lloyd_max: laplacian_support must be positive, got " +
                               std::to_string(options.laplacian_support));
  const Density density = density_for(dist, param, bits, options.laplacian_support);
  const int levels = 1 << bits;
  if (options.max_iterations < 1 || options.quadrature_points < 2 || !(options.tolerance >= 0))
    throw QuantizerConfigError("lloyd_max: bad solver options (max_iterations " +
                               std::to_string(options.max_iterations) + ", quadrature_points " +
                               std::to_string(options.quadrature_points) + ")");
  const Quadrature quad(density, options.quadrature_points);
  const double total = quad.total(0);

  std::vector<double> c(levels), b(levels - 1);
  for (int k = 0; k < levels; ++k)
    c[k] = levels == 1 ? 0.5 * (density.start_lo + density.start_hi)
                       : density.start_lo + (density.start_hi - density.start_lo) * k / (levels - 1);

  int iterations = 0;
  bool converged = false;
  while (iterations < options.max_iterations) {
    ++iterations;
    for (int k = 0; k + 1 < levels; ++k) b[k] = 0.5 * (c[k] + c[k + 1]);
    double max_move = 0.0;
    double lo_mass = 0.0, lo_moment = 0.0;
    for (int k = 0; k < levels; ++k) {
      const double hi_mass = k + 1 < levels ? quad.cumulative(b[k], 0) : total;
      const double hi_moment = k + 1 < levels ? quad.cumulative(b[k], 1) : quad.total(1);
      const double mass = hi_mass - lo_mass;
      if (mass >= kMinCellMass * total) {
        const double next = (hi_moment - lo_moment) / mass;
        max_move = std::max(max_move, std::abs(next - c[k]));
        c[k] = next;
      }
      lo_mass = hi_mass;
      lo_moment = hi_moment;
    }
    if (max_move < options.tolerance) {
      converged = true;
      break;
    }
  }
  for (int k = 0; k + 1 < levels; ++k) b[k] = 0.5 * (c[k] + c[k + 1]);

  // Distortion: sum over cells of the integral of (x - c_k)^2 f.
  double sq = 0.0;
  double prev[3] = {0.0, 0.0, 0.0};
  for (int k = 0; k < levels; ++k) {
    double cur[3];
    for (int m = 0; m < 3; ++m) cur[m] = k + 1 < levels ? quad.cumulative(b[k], m) : quad.total(m);
    sq += (cur[2] - prev[2]) - 2 * c[k] * (cur[1] - prev[1]) + c[k] * c[k] * (cur[0] - prev[0]);
    for (int m = 0; m < 3; ++m) prev[m] = cur[m];
  }

  Codebook book;
  book.distribution = dist;
  book.param = param;
  book.bits = bits;
  book.centroids.assign(c.begin(), c.end());
  book.boundaries.assign(b.begin(), b.end());
  book.distortion = std::max(0.0, sq / total);
  book.iterations = iterations;
  book.converged = converged;
  book.support_lo = density.lo;
  book.support_hi = density.hi;
  return book;
}

const Codebook& lloyd_max_codebook(Distribution dist, int param, int bits) {
  validate(dist, param, bits);
  if (dist == Distribution::kUniformAngle) param = 0;
  using Key = std::tuple<int, int, int>;
  static std::mutex mutex;
  static std::map<Key, std::unique_ptr<const Codebook>> cache;
  const Key key{static_cast<int>(dist), param, bits};
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end())
    it = cache.emplace(key, std::make_unique<const Codebook>(solve_lloyd_max(dist, param, bits))).first;
  return *it->second;
}

uint8_t Codebook::quantize(float v) const {
  return static_cast<uint8_t>(std::lower_bound(boundaries.begin(), boundaries.end(), v) - boundaries.begin());
}

void Codebook::quantize(const float* x, std::size_t n, uint8_t* idx) const {
  simd::count_below(x, n, boundaries.data(), boundaries.size(), idx);
}

}  // namespace veloxquant::core
