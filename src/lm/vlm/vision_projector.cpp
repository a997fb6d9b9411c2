#include "lm/vlm/vision_projector.h"

#include <algorithm>
#include <string>

#include "base/error.h"
#include "lm/kernels/matmul.h"
#include "lm/vlm/clip_vision_tower.h"

namespace lm {

MlpProjector::MlpProjector(WeightMatrix w0, std::vector<float> b0, WeightMatrix w2, std::vector<float> b2,
                           std::shared_ptr<base::ThreadPool> pool)
    : w0_(std::move(w0)), w2_(std::move(w2)), b0_(std::move(b0)), b2_(std::move(b2)), pool_(std::move(pool)) {
  if (!pool_) throw base::InvalidArgument("projector needs a thread pool");
  if (w0_.rows <= 0) throw base::FormatError("projector tensor 'mm.0.weight' is empty");
  if (!b0_.empty() && static_cast<int64_t>(b0_.size()) != w0_.rows) {
    throw base::FormatError("tensor 'mm.0.bias' has " + std::to_string(b0_.size()) + " elements, expected " +
                            std::to_string(w0_.rows));
  }
  if (w2_.rows > 0) {
    if (w2_.cols != w0_.rows) {
      throw base::FormatError("tensor 'mm.2.weight' takes " + std::to_string(w2_.cols) +
                              " inputs but 'mm.0.weight' gives " + std::to_string(w0_.rows));
    }
    if (!b2_.empty() && static_cast<int64_t>(b2_.size()) != w2_.rows) {
      throw base::FormatError("tensor 'mm.2.bias' has " + std::to_string(b2_.size()) + " elements, expected " +
                              std::to_string(w2_.rows));
    }
  }
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

PixelShuffleProjector::PixelShuffleProjector(WeightMatrix fc, int scale_factor, int patches_per_side,
                                             std::shared_ptr<base::ThreadPool> pool)
    : fc_(std::move(fc)), scale_(scale_factor), side_(patches_per_side), pool_(std::move(pool)) {
  if (!pool_) throw base::InvalidArgument("projector needs a thread pool");
  if (scale_ <= 0 || side_ <= 0 || side_ % scale_ != 0) {
    throw base::FormatError("pixel shuffle by " + std::to_string(scale_) +
                            " needs a patch grid side divisible by it, got " + std::to_string(side_));
  }
  if (fc_.rows <= 0 || fc_.cols % (int64_t{scale_} * scale_) != 0) {
    throw base::FormatError("tensor 'mm.model.fc.weight' takes " + std::to_string(fc_.cols) +
                            " inputs, not a multiple of scale_factor^2 = " + std::to_string(scale_ * scale_));
  }
}

std::vector<float> pixel_shuffle(const std::vector<float>& features, int side, int dim, int scale) {
  const int out_side = side / scale;
  const std::size_t width = static_cast<std::size_t>(dim) * scale * scale;
  std::vector<float> out(static_cast<std::size_t>(out_side) * out_side * width);
  for (int oy = 0; oy < out_side; ++oy) {
    for (int ox = 0; ox < out_side; ++ox) {
      float* row = &out[(static_cast<std::size_t>(oy) * out_side + ox) * width];
      for (int dy = 0; dy < scale; ++dy) {
        for (int dx = 0; dx < scale; ++dx) {
          const std::size_t src = (static_cast<std::size_t>(oy * scale + dy) * side + (ox * scale + dx)) * dim;
          std::copy_n(&features[src], dim, row + (static_cast<std::size_t>(dy) * scale + dx) * dim);
        }
      }
    }
  }
  return out;
}

std::vector<float> PixelShuffleProjector::project(const std::vector<float>& features, int64_t n) const {
  const int dim = input_dim();
  if (n != int64_t{side_} * side_ || features.size() != static_cast<std::size_t>(n * dim)) {
    throw base::InvalidArgument("pixel-shuffle projector expects " + std::to_string(side_) + " x " +
                                std::to_string(side_) + " rows of " + std::to_string(dim) + " features, got " +
                                std::to_string(features.size()) + " values");
  }
  const std::vector<float> shuffled = pixel_shuffle(features, side_, dim, scale_);
  const int64_t rows = output_tokens(n);
  std::vector<float> out(static_cast<std::size_t>(rows * fc_.rows));
  kernels::matmul(fc_, shuffled.data(), rows, out.data(), pool_.get());
  return out;
}

}  // namespace lm
