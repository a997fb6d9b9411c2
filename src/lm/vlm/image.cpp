#include "lm/vlm/image.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace lm {

namespace {

// Keys' cubic convolution kernel with a = -0.5 (PIL's BICUBIC), support 2.
double bicubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

// For each output index: the first source index and the normalised weights of the sources.
struct Taps {
  std::vector<int> first;
  std::vector<std::vector<double>> weights;
};

Taps make_taps(int in, int out) {
  const double scale = static_cast<double>(in) / out;
  const double filter_scale = std::max(scale, 1.0);  // widened when shrinking: antialiasing
  const double support = 2.0 * filter_scale;
  Taps taps;
  taps.first.resize(out);
  taps.weights.resize(out);
  for (int i = 0; i < out; ++i) {
    const double center = (i + 0.5) * scale;
    // The tap window rounds as PIL's resampler (precompute_coeffs) does, `(int)(x + 0.5)`, not
    // lround: the two differ on x = 0.5 - 2^-54 and the like, and the bounds must be PIL's
    // (the reference images come from it); negative values are clamped to 0 either way.
    // NOLINTBEGIN(bugprone-incorrect-roundings)
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int hi = std::min(static_cast<int>(center + support + 0.5), in);
    // NOLINTEND(bugprone-incorrect-roundings)
    std::vector<double>& w = taps.weights[i];
    double sum = 0.0;
    for (int k = lo; k < hi; ++k) {
      w.push_back(bicubic((k - center + 0.5) / filter_scale));
      sum += w.back();
    }
    if (sum != 0.0) {
      for (double& v : w) v /= sum;
    }
    taps.first[i] = lo;
  }
  return taps;
}

uint8_t to_u8(double v) { return static_cast<uint8_t>(std::clamp(std::floor(v + 0.5), 0.0, 255.0)); }

}  // namespace

RgbImage resize_bicubic(const RgbImage& image, int width, int height) {
  if (width <= 0 || height <= 0) {
    throw base::InvalidArgument("resize to " + std::to_string(width) + "x" + std::to_string(height) + " is empty");
  }
  if (image.width <= 0 || image.height <= 0) throw base::InvalidArgument("resize of an empty image");
  if (width == image.width && height == image.height) return image;
  // Horizontal pass into an intermediate of width x source height, then the vertical pass.
  const Taps h = make_taps(image.width, width);
  RgbImage mid{width, image.height, std::vector<uint8_t>(static_cast<std::size_t>(width) * image.height * 3)};
  for (int y = 0; y < image.height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < 3; ++c) {
        double acc = 0.0;
        for (std::size_t k = 0; k < h.weights[x].size(); ++k)
          acc += h.weights[x][k] * image.at(h.first[x] + static_cast<int>(k), y, c);
        mid.pixels[(static_cast<std::size_t>(y) * width + x) * 3 + c] = to_u8(acc);
      }
    }
  }
  const Taps v = make_taps(image.height, height);
  RgbImage out{width, height, std::vector<uint8_t>(static_cast<std::size_t>(width) * height * 3)};
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < 3; ++c) {
        double acc = 0.0;
        for (std::size_t k = 0; k < v.weights[y].size(); ++k)
          acc += v.weights[y][k] * mid.at(x, v.first[y] + static_cast<int>(k), c);
        out.pixels[(static_cast<std::size_t>(y) * width + x) * 3 + c] = to_u8(acc);
      }
    }
  }
  return out;
}

RgbImage resize_shortest_edge_and_center_crop(const RgbImage& image, int size) {
  if (size <= 0) throw base::InvalidArgument("image size must be positive, got " + std::to_string(size));
  const int shortest = std::min(image.width, image.height);
  if (shortest <= 0) throw base::InvalidArgument("resize of an empty image");
  // The longer edge scales by the same factor (rounded as transformers' get_resize_output_image_size).
  const int w = image.width == shortest ? size : static_cast<int>(static_cast<int64_t>(size) * image.width / shortest);
  const int h =
      image.height == shortest ? size : static_cast<int>(static_cast<int64_t>(size) * image.height / shortest);
  RgbImage resized = resize_bicubic(image, w, h);
  if (w == size && h == size) return resized;
  const int left = (w - size) / 2, top = (h - size) / 2;
  RgbImage out{size, size, std::vector<uint8_t>(static_cast<std::size_t>(size) * size * 3)};
  for (int y = 0; y < size; ++y) {
    std::copy_n(&resized.pixels[(static_cast<std::size_t>(y + top) * w + left) * 3], static_cast<std::size_t>(size) * 3,
                &out.pixels[static_cast<std::size_t>(y) * size * 3]);
  }
  return out;
}

RgbImage resize_to_fit_and_pad(const RgbImage& image, int size) {
  if (size <= 0) throw base::InvalidArgument("image size must be positive, got " + std::to_string(size));
  if (image.width <= 0 || image.height <= 0) throw base::InvalidArgument("resize of an empty image");
  if (image.width == size && image.height == size) return image;
  const double scale_w = static_cast<double>(size) / image.width, scale_h = static_cast<double>(size) / image.height;
  int w = size, h = size;
  if (scale_w < scale_h) {
    h = std::min(static_cast<int>(std::ceil(image.height * scale_w)), size);
  } else {
    w = std::min(static_cast<int>(std::ceil(image.width * scale_h)), size);
  }
  const RgbImage resized = resize_bicubic(image, std::max(w, 1), std::max(h, 1));
  RgbImage out{size, size, std::vector<uint8_t>(static_cast<std::size_t>(size) * size * 3, 0)};
  const int left = (size - resized.width) / 2, top = (size - resized.height) / 2;
  for (int y = 0; y < resized.height; ++y) {
    std::copy_n(&resized.pixels[static_cast<std::size_t>(y) * resized.width * 3],
                static_cast<std::size_t>(resized.width) * 3,
                &out.pixels[(static_cast<std::size_t>(y + top) * size + left) * 3]);
  }
  return out;
}

std::vector<float> normalize_to_chw(const RgbImage& image, const float mean[3], const float std[3]) {
  const std::size_t plane = static_cast<std::size_t>(image.width) * image.height;
  std::vector<float> out(plane * 3);
  for (int c = 0; c < 3; ++c) {
    for (std::size_t i = 0; i < plane; ++i) {
      out[c * plane + i] = (static_cast<float>(image.pixels[i * 3 + c]) / 255.0f - mean[c]) / std[c];
    }
  }
  return out;
}

}  // namespace lm
