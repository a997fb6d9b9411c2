#include "lm/vlm/vision_projector.h"

#include <string>

#include "base/error.h"
#include "lm/kernels/matmul.h"
#include "lm/vlm/clip_vision_tower.h"

namespace lm {

MlpProjector::MlpProjector(WeightMatrix w0, std::vector<float> b0, WeightMatrix w2, std::vector<float> b2, int threads)
    : w0_(std::move(w0)), w2_(std::move(w2)), b0_(std::move(b0)), b2_(std::move(b2)) {
  if (w0_.rows <= 0) throw base::FormatError("projector tensor 'mm.0.weight' is empty");
  if (!b0_.empty() && static_cast<int64_t>(b0_.size()) != w0_.rows) {
    throw base::FormatError("tensor 'mm.0.bias' has " + std::to_string(b0_.size()) + " elements, expected " +
                            std::to_string(w0_.rows));
  }
  if (w2_.rows > 0) {
    if (w2_.cols != w0_.rows) {
      throw base::FormatError("tensor 'mm.2.weight' takes " + std::to_string(w2_.cols) + " inputs but 'mm.0.weight' gives " +
                              std::to_string(w0_.rows));
    }
    if (!b2_.empty() && static_cast<int64_t>(b2_.size()) != w2_.rows) {
      throw base::FormatError("tensor 'mm.2.bias' has " + std::to_string(b2_.size()) + " elements, expected " +
                              std::to_string(w2_.rows));
    }
  }
  pool_ = std::make_unique<base::ThreadPool>(threads);
}

std::vector<float> MlpProjector::project(const std::vector<float>& features, int64_t n) const {
  if (features.size() != static_cast<std::size_t>(n * w0_.cols)) {
    throw base::InvalidArgument("projector expects " + std::to_string(n) + " x " + std::to_string(w0_.cols) +
                                " features, got " + std::to_string(features.size()));
  }
  const auto affine = [&](const WeightMatrix& w, const std::vector<float>& b, const float* x) {
    std::vector<float> y(static_cast<std::size_t>(n * w.rows));
    kernels::matmul(w, x, n, y.data(), pool_.get());
    if (!b.empty()) {
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t i = 0; i < w.rows; ++i) y[t * w.rows + i] += b[i];
      }
    }
    return y;
  };
  std::vector<float> hidden = affine(w0_, b0_, features.data());
  for (float& h : hidden) h = vision_activation(VisionActivation::kGeluErf, h);
  if (w2_.rows == 0) return hidden;
  return affine(w2_, b2_, hidden.data());
}

}  // namespace lm
